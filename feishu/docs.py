"""Feishu documents adapter: docx, wiki nodes, sheets, drive metas and permissions, read as the app.

Each call returns plain JSON (the `data` object Feishu documents); lark-oapi's typed requests where it has
them, its BaseRequest for the sheets v2 reads it does not model. Failures are ours: a document the app may not
read (not shared with it) or that does not exist becomes `DocUnavailable`, never a pause of other work; a
missing scope turns off only the capability the call serves (feishu/capabilities.py).

Sources: docx v1 document get / blocks list / block children get, wiki v2 space get_node, sheets v2 metainfo
and values, drive v2 permission_public get, drive v1 permission members list, metas batch_query and files
download (open.feishu.cn server docs; request URIs as in lark_oapi/api/{docx,wiki,drive}/…/model/*_request.py).
The docx reads and the download have per-app limits of their own: they are paced (feishu/pacing.py).
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

import lark_oapi as lark
import requests
from lark_oapi.api.docx.v1 import GetDocumentBlockChildrenRequest, GetDocumentRequest, ListDocumentBlockRequest
from lark_oapi.api.drive.v1 import (
    BatchQueryMetaRequest,
    ListPermissionMemberRequest,
    MetaRequest,
    RequestDoc,
)
from lark_oapi.api.drive.v2 import GetPermissionPublicRequest
from lark_oapi.api.wiki.v2 import GetNodeSpaceRequest
from lark_oapi.core.token.manager import TokenManager

from core.errors import Permanent
from feishu.capabilities import SCOPE_MISSING, turn_off
from feishu.client import FeishuApi
from feishu.pacing import Pacer

# The app cannot read it (not a collaborator, or outside its reach) / it does not exist (or was deleted). Read
# errors only, as each error table names them: docx 1770032 forbidden, 1770002 not found, 1770003 resource
# deleted (1770027 and 1770029 are edit errors: column operation over range, block not support to create); wiki
# 131006 / 131005; sheets 1310213 Permission Fail, 1310214 SpreadSheet Not Found, 1310215 Sheet Id Not Found,
# 1310249 Spreadsheet Deleted; drive permissions 1063002 / 1063005; the general table's 91403 FORBIDDEN and
# 91402 NOTEXIST (91401 is PARAMERR: a bad request of ours, not the document); metas' failed_list 970003 / 970005.
NO_ACCESS = {1770032, 131006, 1310213, 1063002, 91403, 970003}
NOT_FOUND = {1770002, 1770003, 131005, 1310214, 1310215, 1310249, 1063005, 91402, 970005}
BLOCK_PAGE = 500  # docx blocks per page (the documented maximum)
MAX_BLOCK_PAGES = 200  # 100,000 blocks: far past any document a request could carry


class DocUnavailable(Permanent):
    """The document cannot be read as the app: `reason` is "no_access" (share it with the app) or "not_found"."""

    def __init__(self, message: str, *, reason: str, code: str) -> None:
        super().__init__(message, source="feishu", code=code)
        self.reason = reason


def unavailable(code: int, message: str) -> Permanent:
    """A failure code as ours: DocUnavailable for the codes above, a plain Permanent for any other."""
    if code in NO_ACCESS:
        return DocUnavailable(message, reason="no_access", code=str(code))
    if code in NOT_FOUND:
        return DocUnavailable(message, reason="not_found", code=str(code))
    return Permanent(message, source="feishu", code=str(code))


def _data(resp: Any) -> dict[str, Any]:
    body = json.loads(resp.raw.content or b"{}") or {}
    data = body.get("data")
    return data if isinstance(data, dict) else {}


class DocsApi:
    """Reads documents through the app's FeishuApi (same token cache, retries and error mapping)."""

    def __init__(self, api: FeishuApi) -> None:
        self.api = api
        self.client = api.client
        self.pacer = Pacer(api.cache.r, api.cache.keys)

    def _call(self, fn: Any, req: Any, capability: str, pace: str = "") -> dict[str, Any]:
        try:
            with self.pacer.slot(pace):
                return _data(self.api._call(fn, req, capability))
        except Permanent as exc:
            code = int(exc.code) if str(exc.code or "").lstrip("-").isdigit() else 0
            if code in NO_ACCESS or code in NOT_FOUND:
                raise unavailable(code, str(exc)) from exc
            raise

    def _get(self, uri: str, capability: str, **query: str) -> dict[str, Any]:
        builder = (lark.BaseRequest.builder().http_method(lark.HttpMethod.GET).uri(uri)
                   .token_types({lark.AccessTokenType.TENANT}))
        req = builder.build()
        for k, v in query.items():
            req.add_query(k, v)
        return self._call(self.client.request, req, capability)

    # -- docx -------------------------------------------------------------------------------------------

    def docx_meta(self, token: str) -> dict[str, Any]:
        """{document_id, revision_id, title}: the cheap revision check."""
        req = GetDocumentRequest.builder().document_id(token).build()
        return dict(self._call(self.client.docx.v1.document.get, req, "documents", "docx_get").get("document") or {})

    def docx_blocks(self, token: str) -> list[dict[str, Any]]:
        """Every block of the document's newest revision, in list order (the renderer walks `children`)."""
        blocks: list[dict[str, Any]] = []
        page_token = ""
        for _ in range(MAX_BLOCK_PAGES):
            builder = ListDocumentBlockRequest.builder().document_id(token).page_size(BLOCK_PAGE) \
                .document_revision_id(-1)
            if page_token:
                builder = builder.page_token(page_token)
            data = self._call(self.client.docx.v1.document_block.list, builder.build(), "documents", "docx_blocks")
            blocks += [b for b in data.get("items") or [] if isinstance(b, dict)]
            page_token = str(data.get("page_token") or "")
            if not data.get("has_more") or not page_token:
                break
        return blocks

    def docx_descendants(self, document_id: str, block_id: str) -> list[dict[str, Any]]:
        """A block and all its descendants, in preorder (block children get, `with_descendants`): how a reference
        synced block's content is read from its source document (docx FAQ "如何获取引用同步块的内容")."""
        blocks: list[dict[str, Any]] = []
        page_token = ""
        for _ in range(MAX_BLOCK_PAGES):
            builder = GetDocumentBlockChildrenRequest.builder().document_id(document_id).block_id(block_id) \
                .with_descendants(True).page_size(BLOCK_PAGE).document_revision_id(-1)
            if page_token:
                builder = builder.page_token(page_token)
            data = self._call(self.client.docx.v1.document_block_children.get, builder.build(), "documents",
                              "docx_children")
            blocks += [b for b in data.get("items") or [] if isinstance(b, dict)]
            page_token = str(data.get("page_token") or "")
            if not data.get("has_more") or not page_token:
                break
        return blocks

    # -- wiki -------------------------------------------------------------------------------------------

    def wiki_node(self, token: str) -> dict[str, Any]:
        """{node_token, obj_token, obj_type, title, space_id, …} of a wiki node."""
        req = GetNodeSpaceRequest.builder().token(token).obj_type("wiki").build()
        return dict(self._call(self.client.wiki.v2.space.get_node, req, "wiki").get("node") or {})

    # -- sheets (v2: lark-oapi has no typed request for these) --------------------------------------------

    def sheet_meta(self, token: str) -> dict[str, Any]:
        """{properties: {title, revision, …}, sheets: [{sheetId, title, index, rowCount, columnCount}]}."""
        return self._get(f"/open-apis/sheets/v2/spreadsheets/{quote(token, safe='')}/metainfo", "sheets")

    def sheet_values(self, token: str, cell_range: str) -> dict[str, Any]:
        """{revision, valueRange: {range, values, revision}} of one range ("<sheetId>!A1:D20")."""
        uri = f"/open-apis/sheets/v2/spreadsheets/{quote(token, safe='')}/values/{quote(cell_range, safe='')}"
        return self._get(uri, "sheets", valueRenderOption="ToString", dateTimeRenderOption="FormattedString")

    # -- drive --------------------------------------------------------------------------------------------

    def link_share(self, token: str, doc_type: str) -> str:
        """Who the link lets in: tenant_readable, tenant_editable, anyone_readable, anyone_editable, closed…"""
        req = GetPermissionPublicRequest.builder().token(token).type(doc_type).build()
        data = self._call(self.client.drive.v2.permission_public.get, req, "doc_share")
        return str((data.get("permission_public") or {}).get("link_share_entity") or "")

    def members(self, token: str, doc_type: str) -> list[dict[str, Any]]:
        """The collaborators: [{member_type (openid, openchat, opendepartmentid, …), member_id, perm, type}]."""
        req = ListPermissionMemberRequest.builder().token(token).type(doc_type).build()
        data = self._call(self.client.drive.v1.permission_member.list, req, "doc_members")
        return [m for m in data.get("items") or [] if isinstance(m, dict)]

    def meta(self, token: str, doc_type: str) -> dict[str, Any]:
        """{title, doc_type, owner_id, latest_modify_time, url} of one document. Feishu answers code 0 and lists
        a document it would not describe in `failed_list` (970003 the app may not, 970005 no such document,
        970002 an unsupported type): DocUnavailable for the first two, Permanent for the rest."""
        body = MetaRequest.builder().request_docs(
            [RequestDoc.builder().doc_token(token).doc_type(doc_type).build()]).with_url(True).build()
        req = BatchQueryMetaRequest.builder().user_id_type("open_id").request_body(body).build()
        data = self._call(self.client.drive.v1.meta.batch_query, req, "drive_files")
        found = next((m for m in data.get("metas") or [] if isinstance(m, dict) and m.get("doc_token") == token), None)
        if found is not None:
            return found
        failed = [f for f in data.get("failed_list") or [] if isinstance(f, dict) and f.get("token") == token]
        code = int(failed[0].get("code") or 0) if failed else 0
        raise unavailable(code, f"drive metas: {doc_type} {token} failed with {code}")

    def file_size(self, token: str) -> int | None:
        """A drive file's size in bytes: no metadata API has it, so the download API is asked for its first byte
        (`Range: bytes=0-0` → 206 with `Content-Range: bytes 0-0/<size>`); None when Feishu would not say, or when
        today's downloads are used up (paced: 5/s, 10,000 a day). A missing scope turns `file_size` off."""
        url = f"{self.api.domain}/open-apis/drive/v1/files/{quote(token, safe='')}/download"
        try:
            with self.pacer.slot("drive_download"):
                bearer = TokenManager.get_self_tenant_token(self.client.config)
                with requests.get(url, headers={"Authorization": f"Bearer {bearer}", "Range": "bytes=0-0"},
                                  stream=True, timeout=self.api.timeout) as resp:
                    found = _TOTAL.search(resp.headers.get("Content-Range") or "")
                    if found:
                        return int(found.group(1))
                    length = resp.headers.get("Content-Length")
                    if resp.status_code == 200 and length and length.isdigit():
                        return int(length)
                    self._download_refused(resp)
                    return None
        except Exception:  # the size is a nicety: never fail the turn for it (NoRoom included)
            return None

    def _download_refused(self, resp: requests.Response) -> None:
        """A refused download's JSON error: the app lacking the scope turns `file_size` off (loudly, once)."""
        try:
            body = json.loads(resp.raw.read(64 * 1024, decode_content=True) or b"{}")
        except ValueError:
            return
        if isinstance(body, dict) and body.get("code") == SCOPE_MISSING:
            turn_off(self.api.cache.r, self.api.cache.keys, "file_size", str(body.get("msg") or ""))


_TOTAL = re.compile(r"/(\d+)\s*$")

