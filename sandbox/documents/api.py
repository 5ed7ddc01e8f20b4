"""Feishu documents for the emulator: docx, wiki nodes, sheets, drive files, their permissions, and the reading APIs.

Each handler gets the request record and answers the documented JSON (or raises the documented FeishuError).
Sources (request URIs and response fields as lark-oapi 1.7.5 models them, errors as the Open API reference lists):
- docx v1 document get / blocks list / block children get (…/document-docx/docx-v1/document-block-children/get,
  `with_descendants`: the block and every descendant in preorder): lark_oapi/api/docx/v1/model/{get_document,
  list_document_block,get_document_block_children}_request.py, document.py, block.py; errors 404 1770002 not
  found, 400 1770022 invalid page token, 403 1770032 forbidden (docx error table, open.feishu.cn
  …/document-docx/docx-v1/…; real answers spell it "forBidden"). Their 5/s per app: sandbox/documents/limits.py.
- wiki v2 get_node: open.feishu.cn/document/ukTMukTMukTM/uUDN04SN0QjL1QDN/wiki-v2/space/get_node (scopes
  wiki:node:read | wiki:wiki | wiki:wiki:readonly), lark_oapi/api/wiki/v2/model/node.py; errors 400 131005 not
  found, 400 131006 permission denied (wiki error table).
- sheets v2 metainfo (…/ukTMukTMukTM/uETMzUjLxEzM14SMxMTN: a tab that is not a grid carries `blockInfo`
  {blockToken, blockType}, e.g. BITABLE_BLOCK with "<app_token>_<table_id>" as bitable-overview shows) and
  "读取单个范围" (open.feishu.cn/document/ukTMukTMukTM/ugTMzUjL4EzM14COxMTN, "返回数据限制为10M"); errors 400
  1310213 Permission Fail, 1310214 SpreadSheet Not Found, 1310215 Sheet Id Not Found, 1310202 Wrong Range,
  1310221 Response Too Large (sheets error tables). Reading cells of a tab that is not a grid is not documented:
  the emulator answers 1310211 Wrong Sheet Id (an assumption; the bot never asks).
- drive v2 permission_public get (…/permission/permission-public/get-2), drive v1 permission members list
  (…/permission/permission-member/list): 400 1063001 Invalid parameter (token/type mismatch, no such document),
  403 1063002 Permission denied, 404 1063005 Resource is deleted; lark_oapi/api/drive/{v2/model/permission_public,
  v1/model/member}.py.
- drive v1 metas batch_query (…/reference/drive-v1/meta/batch_query, lark_oapi/api/drive/v1/model/meta*.py):
  per document failures in failed_list (970003 no permission, 970005 not found, 970002 unsupported type).
- drive v1 files download (…/reference/drive-v1/file/download): the one documented way to learn a file's size
  (a `Range` request answers 206 with Content-Range …/<size>); 404 1061003 not found, 403 1061004 forbidden.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from flask import Response

from sandbox.bitable.items_api import ok
from sandbox.documents.blocks import (
    block_changes,
    byte_range,
    column_letters,
    descendants,
    markdown_blocks,
    new_token,
    page_offset,
    page_size,
    page_token,
    parse_range,
    query_int,
    synced_reference,
    synced_source,
)
from sandbox.feishu.rules import FeishuError

LINK_SHARE = frozenset({"tenant_readable", "tenant_editable", "partner_tenant_readable", "partner_tenant_editable",
                        "anyone_readable", "anyone_editable", "closed"})
MEMBER_KINDS = {"openid": "user", "unionid": "user", "userid": "user", "email": "user", "openchat": "chat",
                "opendepartmentid": "department", "groupid": "group", "wikispaceid": "wiki_space_member"}
PERMS = frozenset({"view", "edit", "full_access"})
WEB_PATHS = {"docx": "docx", "sheet": "sheets", "wiki": "wiki", "file": "file"}
BLOCK_PAGE_MAX = 500  # docx blocks list: page_size default and maximum
SHEET_READ_LIMIT = 10 * 1024 * 1024  # "返回数据限制为10M"
METAS_MAX = 200
SPACE_ID = "7034502641455497244"  # the one wiki space (ids are numeric strings)
Member = tuple[str, str, str]  # (member_type, member_id, perm)


def doc_link(origin: str, kind: str, token: str) -> str:
    """The web link a person pastes: <origin>/docx/<token>, /sheets/, /wiki/, /file/."""
    return f"{origin.rstrip('/')}/{WEB_PATHS[kind]}/{token}"


@dataclass
class Access:
    link_share: str = "closed"
    members: list[Member] = field(default_factory=list)
    app_access: bool = True  # the app was added as a document app / collaborator
    owner: str = "ou_doc_owner"


@dataclass
class Doc:
    """A drive object: kind docx (body: blocks), sheet (body: [{sheetId, title, rows}]) or file (body: type, size)."""

    kind: str
    token: str
    title: str
    access: Access
    created: int
    modified: int
    editor: str
    body: Any
    revision: int = 1
    history: dict[int, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WikiNode:
    node_token: str
    space_id: str
    obj_token: str
    obj_type: str
    title: str
    created: int


def members_of(members: Iterable[Any]) -> list[Member]:
    out = []
    for m in members:
        member_type, member_id, perm = (str(x) for x in m)
        if member_type not in MEMBER_KINDS or perm not in PERMS:
            raise ValueError(f"bad member {m!r}: member_type in {sorted(MEMBER_KINDS)}, perm in {sorted(PERMS)}")
        out.append((member_type, member_id, perm))
    return out


class DocsStore:
    """Documents behind the emulator's lock; the Python controls act as people in the UI, never refused."""

    def __init__(self, lock: threading.RLock, name_of: Callable[[str, str], str],
                 clock: Callable[[], float] = time.time) -> None:
        self.lock, self.name_of, self.clock = lock, name_of, clock
        self.web_origin = "https://feishu.cn"  # where links point (the sandbox's FEISHU_WEB_ORIGIN); kept on reset
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.docs: dict[str, Doc] = {}
            self.nodes: dict[str, WikiNode] = {}
            self.sheet_read_limit = SHEET_READ_LIMIT

    # -- controls (people in the UI) -------------------------------------------------------------------------

    @staticmethod
    def check_share(link_share: str) -> None:
        if link_share not in LINK_SHARE:
            raise ValueError(f"link_share must be one of {sorted(LINK_SHARE)}")

    def add(self, kind: str, title: str, body: Any, token: str | None, access: Access) -> str:
        self.check_share(access.link_share)
        now = int(self.clock())
        doc = Doc(kind, token or new_token(), title, access, now, now, access.owner, body)
        if kind == "docx":
            doc.body = markdown_blocks(doc.token, title, body)
        with self.lock:
            if doc.token in self.docs or doc.token in self.nodes:
                raise ValueError(f"token {doc.token} is taken")
            doc.history[1] = copy.deepcopy(doc.body)
            self.docs[doc.token] = doc
        return doc.token

    def edit_docx(self, token: str, markdown: str, editor: str | None) -> int:
        """Replace the body; the revision grows by the blocks that changed (at least 1), as real edits do."""
        with self.lock:
            doc = self.get(token, "docx")
            blocks = markdown_blocks(doc.token, doc.title, markdown)
            return self._edited(doc, blocks, block_changes(doc.body, blocks), editor)

    def edit_sheet(self, token: str, sheet_title: str, rows: list[list[Any]], editor: str | None) -> int:
        with self.lock:
            doc = self.get(token, "sheet")
            body = copy.deepcopy(doc.body)
            sheet = next((s for s in body if s["title"] == sheet_title), None)
            if sheet is None:
                raise ValueError(f"no sheet {sheet_title!r} in {token}")
            sheet["rows"] = [list(r) for r in rows]
            return self._edited(doc, body, 1, editor)

    def add_synced(self, token: str, block: list[dict[str, Any]], editor: str | None) -> str:
        """Append blocks (a synced block first) to the end of a docx's page; returns the first one's block_id."""
        with self.lock:
            doc = self.get(token, "docx")
            body = copy.deepcopy(doc.body)
            body[0].setdefault("children", []).append(block[0]["block_id"])
            self._edited(doc, body + copy.deepcopy(block), len(block), editor)
            return str(block[0]["block_id"])

    def add_synced_source(self, token: str, markdown: str, editor: str | None) -> str:
        return self.add_synced(token, synced_source(token, markdown), editor)

    def add_synced_reference(self, token: str, source: str, source_block: str, editor: str | None) -> str:
        return self.add_synced(token, [synced_reference(token, source, source_block)], editor)

    def _edited(self, doc: Doc, body: Any, step: int, editor: str | None) -> int:
        doc.body, doc.revision = body, doc.revision + max(1, step)
        doc.history[doc.revision] = copy.deepcopy(body)
        doc.modified, doc.editor = int(self.clock()), editor or doc.access.owner
        return doc.revision

    def get(self, token: str, kind: str | None = None) -> Doc:
        """A document by its token (or a wiki node's token); ValueError names what is missing."""
        with self.lock:
            doc = self.docs.get(token)
            if doc is None and token in self.nodes:
                doc = self.docs.get(self.nodes[token].obj_token)
            if doc is None or (kind is not None and doc.kind != kind):
                raise ValueError(f"no {kind or 'document'} {token}")
            return doc

    def add_node(self, obj_token: str, obj_type: str, node_token: str | None, title: str | None) -> str:
        with self.lock:
            doc = self.get(obj_token, obj_type)
            node = WikiNode(node_token or new_token(), SPACE_ID, obj_token, obj_type, title or doc.title,
                            int(self.clock()))
            if node.node_token in self.docs or node.node_token in self.nodes:
                raise ValueError(f"token {node.node_token} is taken")
            self.nodes[node.node_token] = node
            return node.node_token

    # -- docx --------------------------------------------------------------------------------------------------

    def _docx(self, token: str) -> Doc:
        with self.lock:
            doc = self.docs.get(token)
            if doc is None or doc.kind != "docx":
                raise FeishuError(1770002, http_status=404)
            if not doc.access.app_access:
                raise FeishuError(1770032, http_status=403)
            return doc

    def doc_meta(self, record: dict[str, Any]) -> dict[str, Any]:
        doc = self._docx(record["params"]["document_id"])
        shown = {"show_authors": True, **dict.fromkeys(("show_comment_count", "show_create_time", "show_like_count",
                                                         "show_pv", "show_uv"), False)}
        return ok({"document": {"document_id": doc.token, "revision_id": doc.revision, "title": doc.title,
                                "display_setting": shown}})

    def doc_blocks(self, record: dict[str, Any]) -> dict[str, Any]:
        query = record["query"]
        size = page_size(query.get("page_size"), BLOCK_PAGE_MAX)
        revision = query_int(query.get("document_revision_id") or "-1", "document_revision_id")
        with self.lock:
            doc = self._docx(record["params"]["document_id"])
            if revision != -1 and revision not in doc.history:
                raise FeishuError(1770001, "invalid param: document_revision_id")
            blocks = doc.history[doc.revision if revision == -1 else revision]
            start = page_offset(query.get("page_token"), doc.token)
            page = copy.deepcopy(blocks[start:start + size])
        more = start + size < len(blocks)
        return ok({"items": page, "page_token": page_token(doc.token, start + size) if more else "", "has_more": more})

    def doc_children(self, record: dict[str, Any]) -> dict[str, Any]:
        """Block children get: one block's children, or (with_descendants=true) it and all below, paged."""
        query = record["query"]
        size = page_size(query.get("page_size"), BLOCK_PAGE_MAX)
        # lark-oapi sends a bool query as str(True) → "True"; Feishu's gateway reads it as a bool either way.
        deep = (query.get("with_descendants") or "").lower() in ("true", "t", "1")
        with self.lock:
            doc = self._docx(record["params"]["document_id"])
            items = descendants(doc.history[doc.revision], record["params"]["block_id"], deep)
            start = page_offset(query.get("page_token"), doc.token)
            page = copy.deepcopy(items[start:start + size])
        more = start + size < len(items)
        return ok({"items": page, "page_token": page_token(doc.token, start + size) if more else "", "has_more": more})

    # -- wiki --------------------------------------------------------------------------------------------------

    def wiki_node(self, record: dict[str, Any]) -> dict[str, Any]:
        token, obj_type = record["query"].get("token") or "", record["query"].get("obj_type") or "wiki"
        with self.lock:
            node = self.nodes.get(token) if obj_type == "wiki" else next(
                (n for n in self.nodes.values() if n.obj_token == token and n.obj_type == obj_type), None)
            if node is None:
                raise FeishuError(131005, "not found: node not found")
            doc = self.docs[node.obj_token]
            if not doc.access.app_access:
                raise FeishuError(131006, "permission denied: node permission denied")
            return ok({"node": {
                "space_id": node.space_id, "node_token": node.node_token, "obj_token": node.obj_token,
                "obj_type": node.obj_type, "parent_node_token": "", "node_type": "origin",
                "origin_node_token": node.node_token, "origin_space_id": node.space_id, "has_child": False,
                "title": node.title, "obj_create_time": str(doc.created), "obj_edit_time": str(doc.modified),
                "node_create_time": str(node.created), "creator": doc.access.owner, "owner": doc.access.owner,
                "node_creator": doc.access.owner}})

    # -- sheets ------------------------------------------------------------------------------------------------

    def _book(self, token: str) -> Doc:
        with self.lock:
            doc = self.docs.get(token)
            if doc is None or doc.kind != "sheet":
                raise FeishuError(1310214)
            if not doc.access.app_access:
                raise FeishuError(1310213)
            return doc

    def sheet_meta(self, record: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            book = self._book(record["params"]["token"])
            sheets = [{"sheetId": s["sheetId"], "title": s["title"], "index": i, "rowCount": len(s["rows"]),
                       "columnCount": max((len(r) for r in s["rows"]), default=0), "frozenRowCount": 0,
                       "frozenColCount": 0, **({"blockInfo": s["block"]} if s.get("block") else {})}
                      for i, s in enumerate(book.body)]
            props = {"title": book.title, "revision": book.revision, "sheetCount": len(sheets), "ownerUser": 0,
                     "ownerUserID": book.access.owner}
            return ok({"properties": props, "sheets": sheets, "spreadsheetToken": book.token})

    def sheet_values(self, record: dict[str, Any]) -> dict[str, Any]:
        sheet_id, row0, col0, row1, col1 = parse_range(record["params"]["range"])
        with self.lock:
            book = self._book(record["params"]["token"])
            sheet = next((s for s in book.body if s["sheetId"] == sheet_id), None)
            if sheet is None:
                raise FeishuError(1310215)
            if sheet.get("block"):  # not a grid of cells (undocumented answer: see the module's docstring)
                raise FeishuError(1310211, "Wrong Sheet Id")
            rows = sheet["rows"]
            width = max((len(r) for r in rows), default=0)
            last_row = min(len(rows) - 1 if row1 is None else row1, len(rows) - 1)
            last_col = min(width - 1 if col1 is None else col1, width - 1)
            values = [[(row[c] if c < len(row) else None) for c in range(col0, last_col + 1)]
                      for row in rows[row0:last_row + 1]]
            revision, token = book.revision, book.token
        if len(json.dumps(values, ensure_ascii=False).encode()) > self.sheet_read_limit:
            raise FeishuError(1310221)
        shown = f"{sheet_id}!{column_letters(col0)}{row0 + 1}:{column_letters(max(last_col, col0))}" \
                f"{max(last_row, row0) + 1}"
        return ok({"revision": revision, "spreadsheetToken": token, "valueRange": {
            "majorDimension": "ROWS", "range": shown, "revision": revision, "values": values}})

    # -- drive: permissions, metas, file download ----------------------------------------------------------------

    def _permitted(self, token: str, doc_type: str | None) -> Doc:
        if not doc_type:
            raise FeishuError(99992402, "field validation failed: type is required")
        with self.lock:
            kind = self.docs[token].kind if token in self.docs else "wiki" if token in self.nodes else None
            if kind != doc_type:  # no such document, or the token and type do not match
                raise FeishuError(1063001)
            doc = self.get(token)
            if not doc.access.app_access:
                raise FeishuError(1063002, http_status=403)
            return doc

    def perm_public(self, record: dict[str, Any]) -> dict[str, Any]:
        share = self._permitted(record["params"]["token"], record["query"].get("type")).access.link_share
        return ok({"permission_public": {
            "external_access_entity": "open" if share.startswith("anyone") else "closed",
            "security_entity": "anyone_can_view", "comment_entity": "anyone_can_view", "share_entity": "anyone",
            "manage_collaborator_entity": "collaborator_can_view", "link_share_entity": share,
            "copy_entity": "anyone_can_view", "lock_switch": False}})

    def perm_members(self, record: dict[str, Any]) -> dict[str, Any]:
        """Collaborators only: the owner is not one (metas' owner_id names it); extra fields only on `fields`."""
        query = record["query"]
        doc = self._permitted(record["params"]["token"], query.get("type"))
        wanted = {f.strip() for f in (query.get("fields") or "").split(",") if f.strip()}
        items = []
        for member_type, member_id, perm in list(doc.access.members):
            item: dict[str, Any] = {"member_type": member_type, "member_id": member_id, "perm": perm,
                                    "perm_type": "container"}
            kind = MEMBER_KINDS[member_type]
            extra = {"type": kind, "name": self.name_of(kind, member_id), "avatar": "", "external_label": False}
            item.update({k: v for k, v in extra.items() if "*" in wanted or k in wanted})
            items.append(item)
        return ok({"items": items})

    def drive_metas(self, record: dict[str, Any]) -> dict[str, Any]:
        body = record["json"] if isinstance(record["json"], dict) else {}
        docs = body.get("request_docs")
        if not isinstance(docs, list) or not 1 <= len(docs) <= METAS_MAX:
            raise FeishuError(99992402, f"field validation failed: request_docs holds 1 to {METAS_MAX} documents")
        metas, failed = [], []
        for wanted in docs:
            token, doc_type = str(wanted.get("doc_token", "")), str(wanted.get("doc_type", ""))
            meta, code = self._meta(token, doc_type, bool(body.get("with_url")))
            if meta is None:
                failed.append({"token": token, "code": code})
            else:
                metas.append(meta)
        return ok({"metas": metas, "failed_list": failed})

    def _meta(self, token: str, doc_type: str, with_url: bool) -> tuple[dict[str, Any] | None, int]:
        if doc_type not in WEB_PATHS and doc_type not in ("doc", "bitable", "mindnote", "slides", "folder"):
            return None, 970002
        with self.lock:
            node = self.nodes.get(token) if doc_type == "wiki" else None
            doc = self.docs.get(node.obj_token if node else token)
            if doc is None or (node is None and doc.kind != doc_type):
                return None, 970005
            if not doc.access.app_access:
                return None, 970003
            meta = {"doc_token": token, "doc_type": doc_type, "title": node.title if node else doc.title,
                    "owner_id": doc.access.owner, "create_time": str(doc.created),
                    "latest_modify_user": doc.editor, "latest_modify_time": str(doc.modified)}
            if with_url:
                meta["url"] = doc_link(self.web_origin, doc_type, token)
            return meta, 0

    def download(self, record: dict[str, Any]) -> Response:
        """GET drive/v1/files/:file_token/download; `Range: bytes=a-b` answers 206 with the file's full size."""
        with self.lock:
            doc = self.docs.get(record["params"]["file_token"])
            if doc is None or doc.kind != "file":
                raise FeishuError(1061003, "not found.", http_status=404)
            if not doc.access.app_access:
                raise FeishuError(1061004, "forbidden.", http_status=403)
            size, name = int(doc.body["size"]), doc.title
        first, last, status = byte_range(record["headers"].get("Range"), size)
        resp = Response(bytes(last - first + 1), status=status, mimetype="application/octet-stream")
        ascii_name = name.encode("ascii", "replace").decode().replace('"', "")
        resp.headers["Content-Disposition"] = f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name)}"
        if status == 206:
            resp.headers["Content-Range"] = f"bytes {first}-{last}/{size}"
        return resp
