"""Read a linked document as the app: a cheap revision check every time, a download only for a new revision.

docx: `GET documents/:id` (revision) then, on a cache miss, every block → Markdown (documents/render.py). A
reference synced block whose source is another document lists no children: its content is read from the source
(block children get, `with_descendants`), and that document's id is kept in `sources` (context.py shows it only
to those who may view the source; `bare` is the text without it).
wiki: the node is resolved once (cached) to the object it holds, then read as that object.
sheets: `metainfo` (revision and sheets) then, on a miss, the linked range — or the first grid tab's used range,
bounded — as a Markdown table. Tabs that are not grids (`blockInfo`: an embedded bitable…) are never read as
cells; they are named by title. Other drive files: name, type and size only (drive metas, the download's first
byte; the size cached per modification time).
Rendered text is cached per (token, revision[, range]) for DOCUMENT_CACHE_SECONDS.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from core.errors import AdapterError, Paused
from core.keys import Keys
from documents import keys as doc_keys
from documents.links import DocRef
from documents.render import Heading, docx_markdown, sheet_table
from feishu.docs import DocsApi

SHEET_ROWS, SHEET_COLS = 200, 26  # the bounded table of a sheet linked without a range
READABLE = ("docx", "sheet")  # read whole; other kinds are named only
MAX_SYNCED = 10  # reference synced blocks read from other documents per document (each one call, paced)
SYNCED_CACHE_S = 300.0  # how long a rendering showing other documents' synced blocks is reused
NOT_A_GRID = {"BITABLE_BLOCK": "an embedded bitable", "bitable": "an embedded bitable",
              "#UNSUPPORTED_TYPE": "a kind of tab the API does not read"}


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
    sources: list[str] = field(default_factory=list)  # other documents whose synced blocks `text` shows
    bare: str = ""  # `text` without those blocks' content (when `sources`)
    bare_outline: list[tuple[int, str, int]] = field(default_factory=list)

    @property
    def key(self) -> str:
        """The ledger's id of this document (the object, and the range for sheets)."""
        return f"{self.kind}:{self.token}" + (f"!{self.part}" if self.part else "")

    def headings(self) -> list[Heading]:
        return [Heading(level=lv, text=t, offset=o) for lv, t, o in self.outline]


@dataclass
class Synced:
    """What a document's reference synced blocks show: block_id → the source block and its descendants."""

    content: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    foreign: set[str] = field(default_factory=set)  # those read from another document
    sources: list[str] = field(default_factory=list)  # those documents
    elsewhere: int = 0  # reference synced blocks whose source is elsewhere (read or not)


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
        meta = self.docs.meta(ref.token, ref.kind)  # DocUnavailable when Feishu's failed_list names it
        name = str(meta.get("title") or title or ref.token)
        size = self._file_size(ref.token, str(meta.get("latest_modify_time") or "")) if ref.kind == "file" else None
        facts = f"type {name.rsplit('.', 1)[-1] if '.' in name else ref.kind}" + (f", {size} bytes" if size else "")
        return Doc(kind=ref.kind, token=ref.token, title=name, revision=int(meta.get("latest_modify_time") or 0),
                   read_at=time.time(), named_only=True, text=f"({facts}; only its name, type and size are shown)")

    def _file_size(self, token: str, modified: str) -> int | None:
        """The size a download told once for this modification time (downloads are capped per day)."""
        key = doc_keys.doc_file_size(self.keys, token, modified)
        cached = self.r.get(key)
        if cached:
            return int(cached)
        size = self.docs.file_size(token)
        if size is not None:
            self.r.set(key, str(size), ex=max(1, int(self.ttl_s)))
        return size

    def _node(self, token: str) -> dict[str, Any]:
        key = doc_keys.wiki_node(self.keys, token)
        cached = self.r.get(key)
        if cached:
            return dict(json.loads(cached))
        node = self.docs.wiki_node(token)
        keep = {k: node.get(k) for k in ("obj_token", "obj_type", "title", "space_id", "node_token")}
        self.r.set(key, json.dumps(keep, ensure_ascii=False), ex=max(1, int(self.ttl_s)))
        return keep

    def _cached(self, kind: str, token: str, revision: int, part: str = "") -> Doc | None:
        raw = self.r.get(doc_keys.doc_content(self.keys, kind, token, revision, part))
        return Doc(**json.loads(raw)) if raw else None

    def _store(self, doc: Doc, ttl_s: float | None = None) -> None:
        body = {**asdict(doc), "downloaded": False}
        self.r.set(doc_keys.doc_content(self.keys, doc.kind, doc.token, doc.revision, doc.part),
                   json.dumps(body, ensure_ascii=False), ex=max(1, int(min(self.ttl_s, ttl_s or self.ttl_s))))

    def _docx(self, token: str) -> Doc:
        meta = self.docs.docx_meta(token)  # the revision check: one cheap call
        revision = int(meta.get("revision_id") or 0)
        hit = self._cached("docx", token, revision)
        if hit:
            return hit
        blocks = self.docs.docx_blocks(token)
        synced = self._synced(token, blocks)
        rendered = docx_markdown(blocks, synced.content)
        doc = Doc(kind="docx", token=token, title=str(meta.get("title") or token), revision=revision,
                  text=rendered.text, outline=[(h.level, h.text, h.offset) for h in rendered.outline],
                  read_at=time.time(), downloaded=True, sources=synced.sources)
        if synced.sources:
            bare = docx_markdown(blocks, {b: v for b, v in synced.content.items() if b not in synced.foreign})
            doc.bare, doc.bare_outline = bare.text, [(h.level, h.text, h.offset) for h in bare.outline]
        # A source's edits do not bump this document's revision: its rendering is kept only briefly.
        self._store(doc, SYNCED_CACHE_S if synced.elsewhere else self.ttl_s)
        return doc

    def _synced(self, token: str, blocks: list[dict[str, Any]]) -> Synced:
        """The content of each reference synced block the list shows without children: a source block in this
        document is taken from the list; one in another document is read from there (the app needs read access
        to it, as the docx FAQ says), at most MAX_SYNCED. Unreadable ones stay out (a placeholder says so)."""
        by_id = {str(b.get("block_id")): b for b in blocks}
        found = Synced()
        for block in blocks:
            ref, key = block.get("reference_synced"), str(block.get("block_id"))
            if not isinstance(ref, dict) or block.get("children"):
                continue
            source, source_block = str(ref.get("source_document_id") or ""), str(ref.get("source_block_id") or "")
            if source == token and source_block in by_id:
                found.content[key] = _subtree(by_id, source_block)
                continue
            found.elsewhere += 1
            if not source or not source_block or found.elsewhere > MAX_SYNCED:
                continue
            try:
                found.content[key] = self.docs.docx_descendants(source, source_block)
            except Paused:
                raise
            except AdapterError:  # no access to the source, gone, a missing scope, Feishu down: not shown
                continue
            found.foreign.add(key)
            found.sources += [source] if source not in found.sources else []
        return found

    def _sheet(self, token: str, wanted: str) -> Doc:
        meta = self.docs.sheet_meta(token)
        props = meta.get("properties") or {}
        revision = int(props.get("revision") or 0)
        sheets = [s for s in meta.get("sheets") or [] if isinstance(s, dict)]
        cell_range, sheet_title = _range_of(wanted, sheets)
        hit = self._cached("sheet", token, revision, cell_range)
        if hit:
            return hit
        chosen = next((s for s in sheets if str(s.get("sheetId")) == cell_range.partition("!")[0]), {})
        values: list[list[Any]] = []
        if cell_range and is_grid(chosen):
            data = self.docs.sheet_values(token, cell_range)
            values = list((data.get("valueRange") or {}).get("values") or [])
        text = sheet_table(values, max_rows=SHEET_ROWS, max_cols=SHEET_COLS) if values else "(empty)"
        if chosen and not is_grid(chosen):
            text = f"(this tab is {grid_kind(chosen)}, not a grid of cells: its content cannot be read here)"
        title = str(props.get("title") or token) + (f" / {sheet_title}" if sheet_title else "")
        doc = Doc(kind="sheet", token=token, title=title, revision=revision, part=cell_range,
                  text=text + other_tabs(sheets, chosen), read_at=time.time(), downloaded=True)
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


def is_grid(sheet: dict[str, Any]) -> bool:
    """A tab of cells: sheets v2 metainfo marks any other tab with `blockInfo` ("若含有该字段，则此工作表不为表格"),
    sheets v3 with a `resource_type` other than "sheet". Pure."""
    return "blockInfo" not in sheet and str(sheet.get("resource_type") or "sheet") == "sheet"


def grid_kind(sheet: dict[str, Any]) -> str:
    """What a tab that is not a grid holds, in words (blockType BITABLE_BLOCK: an embedded bitable). Pure."""
    raw = sheet.get("blockInfo")
    block = raw if isinstance(raw, dict) else {}
    kind = str(block.get("blockType") or sheet.get("resource_type") or "")
    return NOT_A_GRID.get(kind) or (f"an embedded {kind.lower().removesuffix('_block')}" if kind else "not a grid")


def other_tabs(sheets: list[dict[str, Any]], chosen: dict[str, Any]) -> str:
    """A closing line naming the tabs that are not grids (never read as cells), so the model knows they exist."""
    named = [f"《{s.get('title') or s.get('sheetId')}》 ({grid_kind(s)})" for s in
             sorted(sheets, key=lambda s: int(s.get("index") or 0)) if not is_grid(s) and s is not chosen]
    return f"\n(tabs that are not grids, not read: {', '.join(named)})" if named else ""


def _subtree(by_id: dict[str, dict[str, Any]], root: str) -> list[dict[str, Any]]:
    """A block and its descendants from the list, in preorder (as `with_descendants` answers), bounded."""
    out: list[dict[str, Any]] = []
    stack, seen = [root], set()
    while stack and len(out) < 10_000:
        key = stack.pop()
        if key in seen or key not in by_id:
            continue
        seen.add(key)
        out.append(by_id[key])
        stack.extend(reversed([c for c in by_id[key].get("children") or [] if isinstance(c, str)]))
    return out


def _range_of(wanted: str, sheets: list[dict[str, Any]]) -> tuple[str, str]:
    """(the range to read, the sheet's title): the linked range as given, a linked sheet's used range, or the
    first grid tab's — bounded to SHEET_ROWS × SHEET_COLS. A linked tab that is not a grid: its id alone (it is
    named, never read). ("", "") when the spreadsheet has no grid. Pure."""
    sheet_id, _, cells = wanted.partition("!")
    chosen = next((s for s in sheets if s.get("sheetId") == sheet_id), None) if sheet_id else None
    if chosen is None:
        ordered = sorted((s for s in sheets if is_grid(s)), key=lambda s: int(s.get("index") or 0))
        chosen = ordered[0] if ordered else None
        cells = ""
    if chosen is None:
        return "", ""
    sid, title = str(chosen.get("sheetId")), str(chosen.get("title") or "")
    if not is_grid(chosen):
        return sid, title
    if cells:
        return f"{sid}!{cells}", title
    rows = max(1, min(SHEET_ROWS + 1, int(chosen.get("rowCount") or 1)))  # the header row, then SHEET_ROWS
    cols = max(1, min(SHEET_COLS, int(chosen.get("columnCount") or 1)))
    return f"{sid}!A1:{_column(cols)}{rows}", title
