"""Read a linked document as the app: a cheap revision check every time, a download only for a new revision.

docx: `GET documents/:id` (revision) then, on a cache miss, every block → Markdown (documents/render.py).
wiki: the node is resolved once (cached) to the object it holds, then read as that object.
sheets: `metainfo` (revision and sheets) then, on a miss, the linked range — or the first sheet's used range,
bounded — as a Markdown table. Other drive files: name and type only (drive metas).
Rendered text is cached per (token, revision[, range]) for DOCUMENT_CACHE_SECONDS.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from bot.feishu.docs import DocsApi
from documents.links import DocRef
from documents.render import Heading, docx_markdown, sheet_table
from memory.keys import Keys

SHEET_ROWS, SHEET_COLS = 200, 26  # the bounded table of a sheet linked without a range
READABLE = ("docx", "sheet")  # read whole; other kinds are named only


@dataclass
class Doc:
    """One document at one revision, as read (or from the cache)."""

    kind: str  # what was read: docx | sheet | file | … (a wiki link resolves to its object's kind)
    token: str  # the object's token
    title: str
    revision: int
    text: str = ""  # Markdown; "" for documents only named (files, unsupported kinds)
    outline: list[tuple[int, str, int]] = field(default_factory=list)  # (level, heading, offset in text)
    read_at: float = 0.0
    wiki: str = ""  # the wiki node token it was linked through, if any
    part: str = ""  # sheets: the range read
    named_only: bool = False  # a file or another kind: name and type only
    downloaded: bool = False  # this read fetched the content (not the cache)

    @property
    def key(self) -> str:
        """The ledger's id of this document (the object, and the range for sheets)."""
        return f"{self.kind}:{self.token}" + (f"!{self.part}" if self.part else "")

    def headings(self) -> list[Heading]:
        return [Heading(level=lv, text=t, offset=o) for lv, t, o in self.outline]


@dataclass
class Reader:
    docs: DocsApi
    r: redis.Redis
    keys: Keys
    ttl_s: float

    def read(self, ref: DocRef) -> Doc:
        """The document behind `ref` at its newest revision. Raises DocUnavailable, Retryable, CapabilityOff."""
        if ref.kind == "wiki":
            node = self._node(ref.token)
            inner = DocRef(kind=_kind_of(str(node.get("obj_type") or "")), token=str(node.get("obj_token") or ""),
                           range=ref.range, url=ref.url)
            doc = self._read_object(inner, str(node.get("title") or ""))
            doc.wiki = ref.token
            return doc
        return self._read_object(ref, "")

    def _read_object(self, ref: DocRef, title: str) -> Doc:
        if ref.kind == "docx":
            return self._docx(ref.token)
        if ref.kind == "sheet":
            return self._sheet(ref.token, ref.range or "")
        meta = self.docs.metas([(ref.token, ref.kind)]).get(ref.token) or {}
        name = str(meta.get("title") or title or ref.token)
        size = self.docs.file_size(ref.token) if ref.kind == "file" else None
        facts = f"type {name.rsplit('.', 1)[-1] if '.' in name else ref.kind}" + (f", {size} bytes" if size else "")
        return Doc(kind=ref.kind, token=ref.token, title=name, revision=int(meta.get("latest_modify_time") or 0),
                   read_at=time.time(), named_only=True, text=f"({facts}; only its name, type and size are shown)")

    def _node(self, token: str) -> dict[str, Any]:
        key = self.keys.wiki_node(token)
        cached = self.r.get(key)
        if cached:
            return dict(json.loads(cached))
        node = self.docs.wiki_node(token)
        keep = {k: node.get(k) for k in ("obj_token", "obj_type", "title", "space_id", "node_token")}
        self.r.set(key, json.dumps(keep, ensure_ascii=False), ex=max(1, int(self.ttl_s)))
        return keep

    def _cached(self, kind: str, token: str, revision: int, part: str = "") -> Doc | None:
        raw = self.r.get(self.keys.doc_content(kind, token, revision, part))
        return Doc(**json.loads(raw)) if raw else None

    def _store(self, doc: Doc) -> None:
        body = {**asdict(doc), "downloaded": False}
        self.r.set(self.keys.doc_content(doc.kind, doc.token, doc.revision, doc.part),
                   json.dumps(body, ensure_ascii=False), ex=max(1, int(self.ttl_s)))

    def _docx(self, token: str) -> Doc:
        meta = self.docs.docx_meta(token)  # the revision check: one cheap call
        revision = int(meta.get("revision_id") or 0)
        hit = self._cached("docx", token, revision)
        if hit:
            return hit
        rendered = docx_markdown(self.docs.docx_blocks(token))
        doc = Doc(kind="docx", token=token, title=str(meta.get("title") or token), revision=revision,
                  text=rendered.text, outline=[(h.level, h.text, h.offset) for h in rendered.outline],
                  read_at=time.time(), downloaded=True)
        self._store(doc)
        return doc

    def _sheet(self, token: str, wanted: str) -> Doc:
        meta = self.docs.sheet_meta(token)
        props = meta.get("properties") or {}
        revision = int(props.get("revision") or 0)
        sheets = [s for s in meta.get("sheets") or [] if isinstance(s, dict)]
        cell_range, sheet_title = _range_of(wanted, sheets)
        hit = self._cached("sheet", token, revision, cell_range)
        if hit:
            return hit
        values: list[list[Any]] = []
        if cell_range:
            data = self.docs.sheet_values(token, cell_range)
            values = list((data.get("valueRange") or {}).get("values") or [])
        title = str(props.get("title") or token) + (f" / {sheet_title}" if sheet_title else "")
        doc = Doc(kind="sheet", token=token, title=title, revision=revision, part=cell_range,
                  text=sheet_table(values, max_rows=SHEET_ROWS, max_cols=SHEET_COLS) if values else "(empty)",
                  read_at=time.time(), downloaded=True)
        self._store(doc)
        return doc


def _kind_of(obj_type: str) -> str:
    return {"docx": "docx", "sheet": "sheet", "doc": "doc", "file": "file", "bitable": "bitable",
            "mindnote": "mindnote", "slides": "slides"}.get(obj_type, obj_type or "file")


def _column(n: int) -> str:
    """1 → A, 26 → Z, 27 → AA."""
    out = ""
    while n > 0:
        n, rem = divmod(n - 1, 26)
        out = chr(65 + rem) + out
    return out


def _range_of(wanted: str, sheets: list[dict[str, Any]]) -> tuple[str, str]:
    """(the range to read, the sheet's title): the linked range as given, a linked sheet's used range, or the
    first sheet's — bounded to SHEET_ROWS × SHEET_COLS. ("", "") when the spreadsheet has no sheet. Pure."""
    sheet_id, _, cells = wanted.partition("!")
    chosen = next((s for s in sheets if s.get("sheetId") == sheet_id), None) if sheet_id else None
    if chosen is None:
        ordered = sorted(sheets, key=lambda s: int(s.get("index") or 0))
        chosen = ordered[0] if ordered else None
        cells = ""
    if chosen is None:
        return "", ""
    sid, title = str(chosen.get("sheetId")), str(chosen.get("title") or "")
    if cells:
        return f"{sid}!{cells}", title
    rows = max(1, min(SHEET_ROWS + 1, int(chosen.get("rowCount") or 1)))  # the header row, then SHEET_ROWS
    cols = max(1, min(SHEET_COLS, int(chosen.get("columnCount") or 1)))
    return f"{sid}!A1:{_column(cols)}{rows}", title
