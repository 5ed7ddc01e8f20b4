"""Who may view a document: the app reading it does not mean the asker may.

A document's content is used for a request only when every sender of the batch may view it:
- it is a material of an item the batch may see (listed in the item's record, and the sender is a member of
  the item's origin chat), or
- its link-share setting lets the whole tenant (or anyone) read it (drive v2 permission_public
  `link_share_entity`), or
- the sender is a collaborator: an `openid` member, or a member of an `openchat` collaborator chat (drive v1
  permission members), or its owner (drive metas `owner_id`).
Department, user-group and wiki-space collaborators cannot be resolved with the app's identity: such a
grant does not count, and the person is told what would let them in.

The three facts come from three APIs, each with its own scopes (feishu/capabilities.py: doc_share,
doc_members, drive_files) and its own failures. Each is read on its own: a fact that could not be read grants
nobody anything, and never takes away what the others proved (a refused owner lookup still lets a
collaborator in). Nothing is ever assumed: with no fact read, nobody but the first rule's people counts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import TypeVar

import redis

from core.errors import AdapterError, Paused
from core.keys import Keys
from documents import keys as doc_keys
from feishu.docs import DocsApi

log = logging.getLogger(__name__)
T = TypeVar("T")
TENANT_WIDE = frozenset({"tenant_readable", "tenant_editable", "anyone_readable", "anyone_editable"})
PERM_TYPE = {"docx": "docx", "sheet": "sheet", "wiki": "wiki", "file": "file", "doc": "doc", "bitable": "bitable",
             "mindnote": "mindnote", "slides": "slides"}


@dataclass
class Acl:
    link_share: str = ""
    users: list[str] = field(default_factory=list)  # open_ids of user collaborators (and the owner)
    chats: list[str] = field(default_factory=list)  # chat collaborators
    unresolved: int = 0  # department / user-group / wiki-space grants: not checkable as the app
    missing: list[str] = field(default_factory=list)  # facts that could not be read: "share", "members", "owner"

    @property
    def complete(self) -> bool:
        """Every fact that could let someone in was read (a tenant-wide link needs no other)."""
        return not self.missing or self.link_share in TENANT_WIDE


def may_view(acl: Acl, sender: str, member_of: Callable[[str, str], bool]) -> bool:
    """Pure apart from `member_of(chat_id, open_id)`, asked only for chat collaborators. Only facts that were
    read are in `acl`: one that could not be read adds nobody."""
    if not sender:
        return False
    if acl.link_share in TENANT_WIDE or sender in acl.users:
        return True
    return any(member_of(chat, sender) for chat in acl.chats)


def read_acl(docs: DocsApi, r: redis.Redis, keys: Keys, kind: str, token: str, ttl_s: float) -> Acl:
    """The view facts of a document (by the token and type it was linked as), cached `ttl_s` seconds."""
    key = doc_keys.doc_acl(keys, kind, token)
    cached = r.get(key) if ttl_s > 0 else None
    if cached:
        known = {f.name for f in fields(Acl)}
        return Acl(**{k: v for k, v in json.loads(cached).items() if k in known})
    acl = _fetch(docs, kind, token)
    if ttl_s > 0 and acl.complete:  # a partly read answer is asked again next time, never remembered
        r.set(key, json.dumps(asdict(acl)), ex=max(1, int(ttl_s)))
    return acl


def _fetch(docs: DocsApi, kind: str, token: str) -> Acl:
    doc_type = PERM_TYPE.get(kind, kind)
    acl = Acl()
    acl.link_share = str(_read(acl, "share", kind, token, lambda: docs.link_share(token, doc_type)) or "")
    if acl.link_share in TENANT_WIDE:
        return acl
    for m in _read(acl, "members", kind, token, lambda: docs.members(token, doc_type)) or []:
        member_type, member_id = str(m.get("member_type") or ""), str(m.get("member_id") or "")
        if member_type == "openid":
            acl.users.append(member_id)
        elif member_type == "openchat":
            acl.chats.append(member_id)
        else:
            acl.unresolved += 1
    if kind != "wiki":  # a wiki node counts its link share and collaborators only (its owner is not looked up)
        meta = _read(acl, "owner", kind, token, lambda: docs.meta(token, doc_type)) or {}
        owner = str(meta.get("owner_id") or "")
        if owner:
            acl.users.append(owner)
    return acl


def _read(acl: Acl, fact: str, kind: str, token: str, call: Callable[[], T]) -> T | None:
    """One fact's call; its failure (no scope, not allowed, Feishu down) leaves the fact unread and counted
    missing. A paused app (credentials) stops the turn, as every Open API call does."""
    try:
        return call()
    except Paused:
        raise
    except AdapterError as exc:
        log.warning("document permission fact not read",
                    extra={"reason": f"{fact} {kind}:{token}", "error": str(exc)[:300]})
        acl.missing.append(fact)
        return None
