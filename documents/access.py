"""Who may view a document: the app reading it does not mean the asker may.

A document's content is used for a request only when every sender of the batch may view it:
- it is a material of an item the batch may see (listed in the item's record, and the sender is a member of
  the item's origin chat), or
- its link-share setting lets the whole tenant (or anyone) read it (drive v2 permission_public
  `link_share_entity`), or
- the sender is a collaborator: an `openid` member, or a member of an `openchat` collaborator chat (drive v1
  permission members), or its owner (drive metas `owner_id`).
Department, user-group and wiki-space collaborators cannot be resolved with the app's identity: such a
grant does not count, and the person is told what would let them in. When the facts cannot be read at all
(no scope, the app may not list collaborators) nobody but the first rule's people counts: never leaked.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import redis

from bot.errors import AdapterError
from bot.feishu.docs import DocsApi
from memory.keys import Keys

log = logging.getLogger(__name__)
TENANT_WIDE = frozenset({"tenant_readable", "tenant_editable", "anyone_readable", "anyone_editable"})
PERM_TYPE = {"docx": "docx", "sheet": "sheet", "wiki": "wiki", "file": "file", "doc": "doc", "bitable": "bitable",
             "mindnote": "mindnote", "slides": "slides"}


@dataclass
class Acl:
    link_share: str = ""
    users: list[str] = field(default_factory=list)  # open_ids of user collaborators (and the owner)
    chats: list[str] = field(default_factory=list)  # chat collaborators
    unresolved: int = 0  # department / user-group / wiki-space grants: not checkable as the app
    known: bool = True  # False: the facts could not be read (nobody counts through them)


def may_view(acl: Acl, sender: str, member_of: Callable[[str, str], bool]) -> bool:
    """Pure apart from `member_of(chat_id, open_id)`, asked only for chat collaborators."""
    if not sender or not acl.known:
        return False
    if acl.link_share in TENANT_WIDE or sender in acl.users:
        return True
    return any(member_of(chat, sender) for chat in acl.chats)


def read_acl(docs: DocsApi, r: redis.Redis, keys: Keys, kind: str, token: str, ttl_s: float) -> Acl:
    """The view facts of a document (by the token and type it was linked as), cached `ttl_s` seconds."""
    key = keys.doc_acl(kind, token)
    cached = r.get(key) if ttl_s > 0 else None
    if cached:
        return Acl(**json.loads(cached))
    acl = _fetch(docs, kind, token)
    if ttl_s > 0 and acl.known:  # an unknown answer is asked again next time, never remembered
        r.set(key, json.dumps(asdict(acl)), ex=max(1, int(ttl_s)))
    return acl


def _fetch(docs: DocsApi, kind: str, token: str) -> Acl:
    doc_type = PERM_TYPE.get(kind, kind)
    try:
        share = docs.link_share(token, doc_type)
        if share in TENANT_WIDE:
            return Acl(link_share=share)
        acl = Acl(link_share=share)
        for m in docs.members(token, doc_type):
            member_type, member_id = str(m.get("member_type") or ""), str(m.get("member_id") or "")
            if member_type == "openid":
                acl.users.append(member_id)
            elif member_type == "openchat":
                acl.chats.append(member_id)
            else:
                acl.unresolved += 1
        if kind != "wiki":
            owner = str((docs.metas([(token, doc_type)]).get(token) or {}).get("owner_id") or "")
            if owner:
                acl.users.append(owner)
        return acl
    except AdapterError as exc:  # no scope, not allowed to list, Feishu down: nobody counts through it
        log.warning("document permissions not read", extra={"reason": f"{kind}:{token}", "error": str(exc)})
        return Acl(known=False)
