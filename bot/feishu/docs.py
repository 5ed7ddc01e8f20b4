"""Feishu documents adapter: docx, wiki nodes, sheets, drive metas and permissions, read as the app.

Each call returns plain JSON (the `data` object Feishu documents); lark-oapi's typed requests where it has
them, its BaseRequest for the sheets v2 reads it does not model. Failures are ours: a document the app may not
read (not shared with it) or that does not exist becomes `DocUnavailable`, never a pause of other work; a
missing scope turns off only the capability the call serves (bot/feishu/capabilities.py).

Sources: docx v1 document get / blocks list, wiki v2 space get_node, sheets v2 metainfo and values,
drive v2 permission_public get, drive v1 permission members list and metas batch_query (open.feishu.cn
server docs; request URIs as in lark_oapi/api/{docx,wiki,drive}/…/model/*_request.py).
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

import lark_oapi as lark
import requests
from lark_oapi.api.docx.v1 import GetDocumentRequest, ListDocumentBlockRequest
from lark_oapi.api.drive.v1 import (
    BatchQueryMetaRequest,
    ListPermissionMemberRequest,
    MetaRequest,
    RequestDoc,
)
from lark_oapi.api.drive.v2 import GetPermissionPublicRequest
from lark_oapi.api.wiki.v2 import GetNodeSpaceRequest
from lark_oapi.core.token.manager import TokenManager

from bot.errors import Permanent
from bot.feishu.client import FeishuApi

# The app cannot read it (not a collaborator, or outside its reach) / it does not exist (or was deleted).
NO_ACCESS = {1770032, 131006, 1310213, 1063002, 91402, 91403, 970003, 1770029}
NOT_FOUND = {1770002, 1770003, 131005, 1310214, 1310215, 1063005, 91401, 970005, 1770027}
BLOCK_PAGE = 500  # docx blocks per page (the documented maximum)
MAX_BLOCK_PAGES = 200  # 100,000 blocks: far past any document a request could carry


class DocUnavailable(Permanent):
    """The document cannot be read as the app: `reason` is "no_access" (share it with the app) or "not_found"."""

    def __init__(self, message: str, *, reason: str, code: str) -> None:
        super().__init__(message, source="feishu", code=code)
        self.reason = reason


def _data(resp: Any) -> dict[str, Any]:
    body = json.loads(resp.raw.content or b"{}") or {}
    data = body.get("data")
    return data if isinstance(data, dict) else {}


class DocsApi:
    """Reads documents through the app's FeishuApi (same token cache, retries and error mapping)."""

    def __init__(self, api: FeishuApi) -> None:
        self.api = api
        self.client = api.client

    def _call(self, fn: Any, req: Any, capability: str) -> dict[str, Any]:
        try:
            return _data(self.api._call(fn, req, capability))
        except Permanent as exc:
            code = int(exc.code) if str(exc.code or "").lstrip("-").isdigit() else 0
            if code in NO_ACCESS:
                raise DocUnavailable(str(exc), reason="no_access", code=str(code)) from exc
            if code in NOT_FOUND:
                raise DocUnavailable(str(exc), reason="not_found", code=str(code)) from exc
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
        return dict(self._call(self.client.docx.v1.document.get, req, "documents").get("document") or {})

    def docx_blocks(self, token: str) -> list[dict[str, Any]]:
        """Every block of the document's newest revision, in list order (the renderer walks `children`)."""
        blocks: list[dict[str, Any]] = []
        page_token = ""
        for _ in range(MAX_BLOCK_PAGES):
            builder = ListDocumentBlockRequest.builder().document_id(token).page_size(BLOCK_PAGE) \
                .document_revision_id(-1)
            if page_token:
                builder = builder.page_token(page_token)
            data = self._call(self.client.docx.v1.document_block.list, builder.build(), "documents")
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
        data = self._call(self.client.drive.v2.permission_public.get, req, "doc_permissions")
        return str((data.get("permission_public") or {}).get("link_share_entity") or "")

    def members(self, token: str, doc_type: str) -> list[dict[str, Any]]:
        """The collaborators: [{member_type (openid, openchat, opendepartmentid, …), member_id, perm, type}]."""
        req = ListPermissionMemberRequest.builder().token(token).type(doc_type).build()
        data = self._call(self.client.drive.v1.permission_member.list, req, "doc_permissions")
        return [m for m in data.get("items") or [] if isinstance(m, dict)]

    def metas(self, docs: list[tuple[str, str]]) -> dict[str, dict[str, Any]]:
        """token → {title, doc_type, owner_id, latest_modify_time, url} for (token, doc_type) pairs."""
        body = MetaRequest.builder().request_docs(
            [RequestDoc.builder().doc_token(t).doc_type(k).build() for t, k in docs]).with_url(True).build()
        req = BatchQueryMetaRequest.builder().user_id_type("open_id").request_body(body).build()
        data = self._call(self.client.drive.v1.meta.batch_query, req, "drive_files")
        return {str(m.get("doc_token")): m for m in data.get("metas") or [] if isinstance(m, dict)}

    def file_size(self, token: str) -> int | None:
        """A drive file's size in bytes: no metadata API has it, so the download API is asked for its first byte
        (`Range: bytes=0-0` → 206 with `Content-Range: bytes 0-0/<size>`); None when Feishu would not say."""
        url = f"{self.api.domain}/open-apis/drive/v1/files/{quote(token, safe='')}/download"
        try:
            bearer = TokenManager.get_self_tenant_token(self.client.config)
            with requests.get(url, headers={"Authorization": f"Bearer {bearer}", "Range": "bytes=0-0"}, stream=True,
                              timeout=self.api.timeout) as resp:
                found = _TOTAL.search(resp.headers.get("Content-Range") or "")
                if found:
                    return int(found.group(1))
                length = resp.headers.get("Content-Length")
                return int(length) if resp.status_code == 200 and length and length.isdigit() else None
        except Exception:  # the size is a nicety: never fail the turn for it
            return None


_TOTAL = re.compile(r"/(\d+)\s*$")

