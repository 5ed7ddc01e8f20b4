"""The emulator's test-facing controls (faults, profiles, delays, hooks, documents made as people make them) and
its inspection of requests and sends."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sandbox.documents.api import Access, doc_link, members_of
from sandbox.documents.blocks import new_token
from sandbox.faults import FAULT_FIELD, Fault, FaultBook, FaultProfile
from sandbox.feishu.cardkit import card_text
from sandbox.feishu.rules import check_ops, error_body, fault_kinds_for, fault_options, make_fault

if TYPE_CHECKING:
    from sandbox.documents.api import DocsStore
    from sandbox.documents.limits import DocLimits
    from sandbox.feishu.cardkit import CardKitStore
    from sandbox.feishu.store import FeishuStore

OPS = (
    "token", "bot_info", "scopes", "reply", "create", "get", "list", "chat", "resource", "message_patch",
    "chat_members", "chat_is_in", "chat_search",
    "drive_subscribe", "bitable_fields", "bitable_search", "bitable_batch_get", "bitable_create", "bitable_update",
    "reaction_add", "reaction_remove", "reaction_list",
    "doc_meta", "doc_blocks", "doc_children", "wiki_node", "sheet_meta", "sheet_values", "perm_public", "perm_members",
    "drive_metas", "drive_download",
    "card_create", "card_content", "card_update", "card_settings",
)
DOC_OWNER = "ou_doc_owner"
Hook = Callable[[dict[str, Any]], object]


class Controls:
    """Mixed into FeishuEmulator, whose __init__ makes the state used here."""

    if TYPE_CHECKING:
        store: FeishuStore
        _lock: threading.RLock
        _faults: FaultBook
        _delays: dict[str, float]
        _hooks: dict[str, list[tuple[str, Hook]]]
        _requests: list[dict[str, Any]]
        denied_scopes: frozenset[str]


    def deny_scopes(self, scopes: Iterable[str]) -> None:
        """The app lacks these scopes: an operation none of whose accepted scopes is left answers 99991672
        (a fault profile for a tenant that granted only part of what the app asks for)."""
        self.denied_scopes = frozenset(scopes)

    def clear_faults(self) -> None:
        """Drop queued faults and profiles, keeping messages and tokens (an operator fixed the cause)."""
        self._faults.clear()

    def inject(
        self, op: str, *, code: int, http_status: int = 400, times: int = 1,
        headers: dict[str, str] | None = None, msg: str = "", into: dict[str, Any] | None = None,
    ) -> None:
        """Make the next `times` calls of `op` fail with this JSON error (code 0 + 5xx → gateway error). `into`: a
        request's record a "before" hook holds: that request, and no other call of `op` racing it, fails."""
        _check_op(op)
        self._fault(op, Fault(http_status, error_body(code, msg), dict(headers or {}), times), into)

    def inject_fault(self, op: str, kind: str, *, times: int = 1, into: dict[str, Any] | None = None,
                     **options: float) -> None:
        """Make the next `times` calls of `op` fail with one fault kind (see sandbox.feishu.rules.FAULT_KINDS).

        options: reset_seconds (x-ogw-ratelimit-reset), timeout_seconds (how long a timeout holds the
        response; set it past the client's timeout), gateway_status (5xx for gateway kinds).
        """
        _check_op(op)
        fault_kinds_for(op, {kind: 1.0})
        self._fault(op, make_fault(kind, fault_options(options), times), into)

    def _fault(self, op: str, fault: Fault, into: dict[str, Any] | None) -> None:
        if into is not None:
            into[FAULT_FIELD] = fault  # taken by this request alone (emulator.py), not queued for the next call
        else:
            self._faults.add(op, fault)

    def set_profile(
        self, ops: str | Iterable[str], rate: float, mix: Mapping[str, float] | None = None, *,
        seed: int | None = None, **options: float,
    ) -> None:
        """Fail a random `rate` of each op's calls with a weighted `mix` of fault kinds.

        Each op draws from its own generator seeded with (seed, op), so a seed replays the same sequence
        of faults per op. Queued inject/inject_fault faults still come first. Options as inject_fault.
        """
        settings = fault_options(options)
        profiles = {
            op: FaultProfile(rate, fault_kinds_for(op, mix), None if seed is None else f"{seed}:{op}", **settings)
            for op in check_ops(ops, OPS)
        }
        for op, profile in profiles.items():
            self._faults.set_profile(op, profile)

    def clear_profile(self, ops: str | Iterable[str] | None = None) -> None:
        self._faults.clear_profiles(None if ops is None else check_ops(ops, OPS))

    @property
    def profiles(self) -> dict[str, dict[str, Any]]:
        return self._faults.profiles()

    def set_delay(self, op: str, seconds: float) -> None:
        _check_op(op)
        with self._lock:
            self._delays[op] = float(seconds)

    def on(self, op: str, callback: Hook, *, when: str = "after") -> None:
        """Call `callback(record)` on each `op` call.

        when="after": the effect is applied but the response is not sent yet (kill a worker "mid-reply");
        when="before": before delay, auth and handling. After-hooks also see "status" and "response";
        with an injected timeout or reset they run before the wait or the reset.
        """
        _check_op(op)
        if when not in ("before", "after"):
            raise ValueError("when must be 'before' or 'after'")
        with self._lock:
            self._hooks.setdefault(op, []).append((when, callback))

    # -- inspection ---------------------------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._requests)

    @property
    def messages(self) -> list[dict[str, Any]]:
        with self.store.lock:
            return copy.deepcopy(self.store.messages)

    @property
    def token_requests(self) -> int:
        return self.store.token_requests

    @property
    def dedupe_hits(self) -> int:
        return self.store.dedupe_hits

    @property
    def stats(self) -> dict[str, Any]:
        """Calls per op, faults per op and kind, uuid dedupe hits, 230020 rejections, tokens and sends."""
        with self.store.lock:
            store = {
                "dedupe_hits": self.store.dedupe_hits,
                "chat_limit_rejections": dict(self.store.chat_limit_rejections),
                "token_requests": self.store.token_requests,
                "tokens_revoked": self.store.tokens_revoked,
                "messages": len(self.store.messages),
                "bot_messages": len(self.store.bot_sent),
            }
        return {**self._faults.counters.snapshot(), **store, "peak_sends_per_second": self.store.peak_sends(1.0)}

    def sends(self, chat_id: str | None = None) -> dict[str, list[float]]:
        """Per chat, the time.time() of every message the bot sent (dedupe hits excluded), in order."""
        return self.store.send_log(chat_id)

    def peak_sends(self, window: float = 1.0) -> dict[str, int]:
        """Per chat, the most bot sends within any `window` seconds: check pacing against Feishu's 5/s."""
        return self.store.peak_sends(window)

    def bot_messages(self, chat_id: str | None = None, thread_id: str | None = None) -> list[dict[str, Any]]:
        """Messages the bot sent, in creation order, optionally narrowed to a chat and/or topic."""
        return self.store.bot_messages(chat_id, thread_id)

    def replies_to(self, message_id: str) -> list[dict[str, Any]]:
        """The bot's replies to one message, in creation order."""
        return self.store.replies_to(message_id)

    def app_link(self, message_id: str) -> str:
        """The message_app_link the bot's send or reply of `message_id` was answered with ("" if none)."""
        return self.store.app_link(message_id)

    def feed(self, cursor: int = 0, *, bot_only: bool = True) -> tuple[list[dict[str, Any]], int]:
        """Messages stored since `cursor` (0 = all) and the cursor for the next call: cheap polling."""
        return self.store.feed(cursor, bot_only)

    def requests_since(self, cursor: int = 0) -> list[dict[str, Any]]:
        """Recorded requests from position `cursor` on (the next cursor is cursor + len(result))."""
        with self._lock:
            return copy.deepcopy(self._requests[max(cursor, 0):])

    def describe(self) -> str:
        with self._lock:
            last = [f"{r['method']} {r['path']}" for r in self._requests[-5:]]
        with self.store.lock:
            counts = len(self.store.messages), len(self.store.bot_sent)
        return f"emulator: {counts[0]} messages ({counts[1]} from the bot); last requests: {last}"


def _check_op(op: str) -> None:
    check_ops(op, OPS)


class DocControls:
    """Documents as people make and share them in the UI (never refused); FeishuEmulator's __init__ makes `docs`.

    members: (member_type, member_id, perm) tuples, e.g. ("openid", "ou_x", "view"), ("openchat", "oc_x", "edit").
    app_access=False: the app was never added to the document, so every API answers its permission error.
    """

    if TYPE_CHECKING:
        docs: DocsStore
        doc_limits: DocLimits

    def add_doc(self, title: str, markdown: str, *, token: str | None = None, link_share: str = "closed",
                members: Iterable[Any] = (), app_access: bool = True, owner: str = DOC_OWNER) -> str:
        """A docx document (blocks built from simple Markdown), revision_id 1; returns its document_id."""
        return self.docs.add("docx", title, markdown, token, Access(link_share, members_of(members), app_access,
                                                                     owner))

    def edit_doc(self, token: str, markdown: str, *, editor: str | None = None) -> int:
        """Replace the body; returns the new revision_id (one step per changed block, at least one)."""
        return self.docs.edit_docx(token, markdown, editor)

    def add_synced_source(self, token: str, markdown: str, *, editor: str | None = None) -> str:
        """Append a source synced block holding `markdown` to a docx; returns its block_id."""
        return self.docs.add_synced_source(token, markdown, editor)

    def add_synced_reference(self, token: str, source: str, source_block: str, *, editor: str | None = None) -> str:
        """Paste the synced block `source_block` of docx `source` at the end of docx `token` (a reference synced
        block: no children of its own); returns its block_id."""
        return self.docs.add_synced_reference(token, source, source_block, editor)

    def set_doc_limit(self, op: str, *, per_second: int | None = None, per_day: int | None = None) -> None:
        """The documented per-app limits (doc_meta, doc_blocks, doc_children 5/s; drive_download 5/s and 10,000 a
        day), lowered for a test; `doc_rejections` counts the calls refused for them."""
        self.doc_limits.set(op, per_second=per_second, per_day=per_day)

    @property
    def doc_rejections(self) -> dict[str, int]:
        with self.doc_limits.lock:
            return dict(self.doc_limits.rejections)

    def add_wiki_node(self, obj_token: str, obj_type: str = "docx", *, node_token: str | None = None,
                      title: str | None = None) -> str:
        """Mount a document in the wiki space; returns the node_token (its access is the document's)."""
        return self.docs.add_node(obj_token, obj_type, node_token, title)

    def add_sheet(self, title: str, sheets: Mapping[str, list[list[Any]] | str], *, token: str | None = None,
                  link_share: str = "closed", members: Iterable[Any] = (), app_access: bool = True,
                  owner: str = DOC_OWNER) -> str:
        """A spreadsheet with one sheet per entry (first sheet first, sheetIds generated); returns its token.
        A tab given as a string is not a grid but an embedded block of that blockType (e.g. "BITABLE_BLOCK")."""
        body = [{"sheetId": new_token(6), "title": name, "rows": [list(r) for r in rows]} if not isinstance(rows, str)
                else {"sheetId": new_token(6), "title": name, "rows": [],
                      "block": {"blockToken": f"{new_token()}_tbl{new_token(13)}", "blockType": rows}}
                for name, rows in sheets.items()]
        return self.docs.add("sheet", title, body, token, Access(link_share, members_of(members), app_access, owner))

    def sheet_ids(self, token: str) -> dict[str, str]:
        """A spreadsheet's sheets: title → sheetId, in order (what a ?sheet= link names)."""
        with self.docs.lock:
            return {s["title"]: s["sheetId"] for s in self.docs.get(token, "sheet").body}

    def edit_sheet(self, token: str, sheet_title: str, rows: list[list[Any]], *, editor: str | None = None) -> int:
        """Replace one sheet's cells; returns the spreadsheet's new revision."""
        return self.docs.edit_sheet(token, sheet_title, rows, editor)

    def add_drive_file(self, name: str, type: str, size: int, *, token: str | None = None,
                       link_share: str = "closed", members: Iterable[Any] = (), app_access: bool = True,
                       owner: str = DOC_OWNER) -> str:
        """A file in the drive (`type` its extension, `size` in bytes); returns its file token."""
        return self.docs.add("file", name, {"type": type, "size": int(size)}, token,
                             Access(link_share, members_of(members), app_access, owner))

    def set_doc_access(self, token: str, *, link_share: str | None = None, members: Iterable[Any] | None = None,
                       app_access: bool | None = None) -> dict[str, Any]:
        """Change who may read a document, sheet, file or wiki node's document; returns its doc_info."""
        with self.docs.lock:
            access = self.docs.get(token).access
            if link_share is not None:
                self.docs.check_share(link_share)
                access.link_share = link_share
            if members is not None:
                access.members = members_of(members)
            if app_access is not None:
                access.app_access = bool(app_access)
        return self.doc_info(token)

    def doc_info(self, token: str) -> dict[str, Any]:
        """What the UI shows of a document (or a wiki node's): kind, token, title, revision, link, access."""
        with self.docs.lock:
            doc = self.docs.get(token)
            return {"kind": doc.kind, "token": doc.token, "title": doc.title, "revision": doc.revision,
                    "link": self.doc_link(doc.kind, doc.token), "link_share": doc.access.link_share,
                    "members": [list(m) for m in doc.access.members], "app_access": doc.access.app_access,
                    "owner": doc.access.owner}

    def doc_link(self, kind: str, token: str) -> str:
        """The web link of a docx, sheet, wiki node or file, at the emulator's web origin."""
        return doc_link(self.docs.web_origin, kind, token)

    def set_web_origin(self, origin: str) -> None:
        """Where links point (the sandbox's FEISHU_WEB_ORIGIN); drive metas' url uses it too."""
        self.docs.web_origin = origin.rstrip("/")

    def set_sheet_read_limit(self, nbytes: int) -> None:
        """The values read's response cap (documented: 10 MB); past it → 1310221 Response Too Large."""
        self.docs.sheet_read_limit = int(nbytes)


class CardKitControls:
    """Card entities as tests see them; FeishuEmulator's __init__ makes `cardkit` (sandbox/feishu/cardkit.py)."""

    if TYPE_CHECKING:
        cardkit: CardKitStore
        store: FeishuStore

    def card_text(self, message_id: str) -> str:
        """The text a card message shows now: a card entity's current markdown / plain_text, or a raw card's."""
        entity = self.cardkit.by_message(message_id)
        with self.store.lock:
            if entity is not None:
                return card_text(entity.card)
            msg = self.store.by_id.get(message_id)
            if msg is None or msg["msg_type"] != "interactive":
                raise KeyError(f"no card message {message_id}")
            return card_text(json.loads(msg["body"]["content"]))

    def card_history(self, card_id: str) -> list[dict[str, Any]]:
        """Every accepted op on the entity, in order: at (epoch seconds, time.time()), mono (time.monotonic()),
        op (card_create, send, card_content, card_update, card_settings, streaming_timeout), sequence, length and
        text (what the card's body shows after it), streaming (after it)."""
        return self.cardkit.history(card_id)

    def cards(self) -> list[dict[str, Any]]:
        """Every card entity: card_id, message_id (None until sent), streaming, timed_out, sequence, created, text,
        card."""
        return self.cardkit.listing()

    def card_of(self, message_id: str) -> str | None:
        """The card_id a message shows, None for a message that shows no entity."""
        entity = self.cardkit.by_message(message_id)
        return entity.card_id if entity else None

    def age_card(self, card_id: str, seconds: float) -> None:
        """Make the entity `seconds` older (its 14-day life and its 10-minute streaming window run out sooner)."""
        self.cardkit.age(card_id, seconds)

    def render_defects(self) -> list[dict[str, str]]:
        """What clients would show badly though Feishu accepted it (sandbox/feishu/card_render.py): where (card
        <card_id> or message <message_id>), kind (tables_per_markdown, indented_fence, summary_markup,
        stale_summary) and detail; each (where, kind) once."""
        with self.store.lock:
            return [*self.store.render_defects.entries, *self.cardkit.defects.entries]

    def set_cardkit_limits(self, *, per_card_qps: int | None = None, app_qps: int | None = None,
                           streaming_timeout_s: float | None = None) -> None:
        """Documented: 10 ops/s per card, 50/s per app (1000/min: set_api_qpm; neither counts ops on a card in
        streaming mode), streaming closes 600 s after it was last turned on (shorten it to test a long turn)."""
        with self.cardkit.lock:
            if per_card_qps is not None:
                self.cardkit.per_card_qps = per_card_qps
            if app_qps is not None:
                self.cardkit.app_qps = app_qps
            if streaming_timeout_s is not None:
                self.cardkit.streaming_timeout_s = streaming_timeout_s
