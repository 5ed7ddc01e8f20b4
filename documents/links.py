"""Recognise Feishu document references (links and bare tokens) in free text, and build the web link back.

Link shapes, from "How to get the tokens for various Docs types"
(https://open.feishu.cn/document/faq/trouble-shooting/how-to-get-docs-tokens): `https://sample.feishu.cn/docx/<id>`,
`/wiki/<node_token>`, `/sheets/<spreadsheet_token>`, `/file/<file_token>`, `/docs/<doc_token>` (legacy),
`/base/<app_token>`; every documented token is 27 letters and digits. `/drive/folder/<token>` is a folder, not a
document, so it is no reference. `/slides/` as larksuite/cli prints them; `/mindnotes/` by analogy (unverified).
Sheet links may name a sheet (`?sheet=<sheetId>`) and cells (`&range=`, plain A1 or base64 of it).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, parse_qs, quote, urlsplit

# Feishu (feishu.cn), Lark (larksuite.com) and the Feishu docs domain (larkoffice.com), plus the pre-release
# hosts the same registrant (京ICP备16045432号) lists: feishu-pre.cn/.net, feishu-boe.net, feishu-staging.cn, ...
FEISHU_DOMAINS = (
    "feishu.cn", "feishu.net", "larksuite.com", "larkoffice.com", "feishu-pre.cn", "feishu-pre.net",
    "feishu-boe.net", "feishu-staging.cn", "larkofficeboe.com", "larkofficepre.com", "larksuite-pre.com",
)
PATHS = {"docx": "docx", "wiki": "wiki", "sheets": "sheet", "file": "file", "docs": "doc", "mindnotes": "mindnote",
         "slides": "slides", "base": "bitable"}
_SEGMENT = {kind: segment for segment, kind in PATHS.items()}
# A bare token names its kind by its prefix (legacy tokens: doxcn…, wikcn…, shtcn…, boxcn…, doccn…; 27 chars).
PREFIXES = {"doxcn": "docx", "wikcn": "wiki", "shtcn": "sheet", "boxcn": "file", "doccn": "doc"}

_TOKEN = re.compile(r"[A-Za-z0-9]{16,64}")
_SHEET_ID = re.compile(r"[A-Za-z0-9]{1,32}")
_CELL = r"(?:[A-Z]{1,3}[0-9]{0,7}|[0-9]{1,7})"
_CELLS = re.compile(rf"{_CELL}(?::{_CELL})?")
_FRAGMENT_RANGE = re.compile(rf"[A-Za-z0-9]{{6}}(?:!{_CELL}(?::{_CELL})?)?")
_URL_CHAR = r"[A-Za-z0-9\-._~:/?#@!$&+,;=%]"
# A markdown link (only its target counts), a URL, or a scheme-less host/path; all of them are masked for bare tokens.
_CANDIDATES = re.compile(
    r"\[[^\]\n]{0,300}\]\(\s*<?(?P<target>[^()<>\s]*)>?(?:\s+\"[^\"\n]*\")?\s*\)"
    rf"|(?P<url>https?://{_URL_CHAR}+)"
    rf"|(?P<bare>(?<![A-Za-z0-9._~%@/:-])[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+(?::[0-9]{{1,5}})?/{_URL_CHAR}*)",
    re.IGNORECASE,
)
_BARE_TOKEN = re.compile(rf"(?<![A-Za-z0-9_./=?&#%@:-])(?:{'|'.join(PREFIXES)})[A-Za-z0-9]{{22}}(?![A-Za-z0-9_])")
_TRAILING = ".,;:!?&'"
_Origin = tuple[str, str, int, tuple[str, ...]]  # scheme, host, port, path segments


@dataclass(frozen=True)
class DocRef:
    kind: str  # "docx" | "wiki" | "sheet" | "file" | "doc" (legacy /docs/) | "mindnote" | "slides" | "bitable"
    token: str
    range: str | None = None  # sheets only: "<sheetId>" or "<sheetId>!A1:C10"
    url: str = ""  # the link as written (or the bare token)


def find_refs(text: str, origins: Sequence[str] = ()) -> list[DocRef]:
    """Every document reference in `text`, in order of first appearance, once per (kind, token, range)."""
    if not isinstance(text, str) or not text:
        return []
    allowed = [parsed for parsed in map(_origin, origins) if parsed is not None]
    found: list[tuple[int, DocRef]] = []
    masked: list[tuple[int, int]] = []
    for match in _CANDIDATES.finditer(text):
        masked.append(match.span())
        raw = (match.group("target") or match.group("url") or match.group("bare") or "").rstrip(_TRAILING)
        ref = _from_url(raw, allowed)
        if ref is not None:
            found.append((match.start(), ref))
    found.extend((start, ref) for start, ref in _bare_tokens(text) if not _inside(start, masked))
    return _unique(ref for _, ref in sorted(found, key=lambda pair: pair[0]))


def link_of(origin: str, ref: DocRef) -> str:
    """The canonical web link of `ref` under `origin` (e.g. "https://sample.feishu.cn")."""
    if ref.kind not in _SEGMENT:
        raise ValueError(f"unknown document kind {ref.kind!r}")
    base = origin.rstrip("/") if "://" in origin else "https://" + origin.rstrip("/")
    link = f"{base}/{_SEGMENT[ref.kind]}/{ref.token}"
    if ref.kind == "sheet" and ref.range:
        sheet, _, cells = ref.range.partition("!")
        link += "?sheet=" + quote(sheet, safe="") + ("&range=" + quote(cells, safe=":") if cells else "")
    return link


def is_feishu_host(host: str) -> bool:
    host = host.lower().rstrip(".")
    return any(host == domain or host.endswith("." + domain) for domain in FEISHU_DOMAINS)


def _origin(origin: str) -> _Origin | None:
    """(scheme, host, port, path segments) of a configured origin such as "http://127.0.0.1:8123"."""
    parts = _split(origin if "://" in origin else "http://" + origin)
    if parts is None or not parts.hostname:
        return None
    return parts.scheme.lower(), parts.hostname.lower(), _port(parts), tuple(s for s in parts.path.split("/") if s)


def _split(url: str) -> SplitResult | None:
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError on a malformed port
    except ValueError:
        return None
    return parts


def _port(parts: SplitResult) -> int:
    return parts.port or (443 if parts.scheme.lower() == "https" else 80)


def _from_url(raw: str, origins: list[_Origin]) -> DocRef | None:
    parts = _split(raw if "://" in raw else "https://" + raw)
    if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    segments = [s for s in parts.path.split("/") if s]
    if not is_feishu_host(parts.hostname):
        prefix = _matching_origin(parts, origins) if "://" in raw else None  # a sandbox origin names its scheme
        if prefix is None:
            return None
        segments = segments[len(prefix):]
    if len(segments) < 2 or segments[0] not in PATHS or not _TOKEN.fullmatch(segments[1]):
        return None
    kind = PATHS[segments[0]]
    cells = _sheet_range(parts.query, parts.fragment) if kind == "sheet" else None
    return DocRef(kind, segments[1], cells, raw)


def _matching_origin(parts: SplitResult, origins: list[_Origin]) -> tuple[str, ...] | None:
    segments = tuple(s for s in parts.path.split("/") if s)
    for scheme, host, port, prefix in origins:
        same = (parts.scheme.lower(), (parts.hostname or "").lower(), _port(parts)) == (scheme, host, port)
        if same and segments[: len(prefix)] == prefix:
            return prefix
    return None


def _sheet_range(query: str, fragment: str) -> str | None:
    """"<sheetId>" or "<sheetId>!A1:C10" from `?sheet=…(&range=…)`, or from a `#<sheetId>` fragment."""
    params = parse_qs(query.replace("&amp;", "&"))
    sheet = (params.get("sheet") or [""])[0]
    if _SHEET_ID.fullmatch(sheet):
        cells = _cells((params.get("range") or [""])[0])
        return f"{sheet}!{cells}" if cells else sheet
    return fragment if _FRAGMENT_RANGE.fullmatch(fragment) else None


def _cells(value: str) -> str | None:
    """An A1 range, written plainly or (as copied links seem to carry it) base64-encoded."""
    if not value:
        return None
    if _CELLS.fullmatch(value.upper()):
        return value.upper()
    squeezed = value.replace(" ", "+").replace("-", "+").replace("_", "/")
    try:
        decoded = base64.b64decode(squeezed + "=" * (-len(squeezed) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        return None
    return decoded.upper() if _CELLS.fullmatch(decoded.upper()) else None


def _bare_tokens(text: str) -> Iterator[tuple[int, DocRef]]:
    for match in _BARE_TOKEN.finditer(text):
        token = match.group()
        yield match.start(), DocRef(PREFIXES[token[:5]], token, None, token)


def _inside(position: int, spans: list[tuple[int, int]]) -> bool:
    """Whether `position` falls in one of `spans` (sorted, disjoint: regex matches in order)."""
    index = bisect.bisect_right(spans, position, key=lambda span: span[0]) - 1
    return index >= 0 and spans[index][0] <= position < spans[index][1]


def _unique(refs: Iterator[DocRef]) -> list[DocRef]:
    seen: set[tuple[str, str, str | None]] = set()
    unique = []
    for ref in refs:
        key = (ref.kind, ref.token, ref.range)
        if key not in seen:
            seen.add(key)
            unique.append(ref)
    return unique
