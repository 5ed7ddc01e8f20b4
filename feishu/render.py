"""Markdown answer → Feishu message content: plain `text`, a `post` of `md` rows, or a card with a markdown element."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from lark_oapi.channel.card import new_card
from lark_oapi.channel.outbound.markdown.to_post import markdown_to_post_ast
from lark_oapi.channel.outbound.sender import chunk_text

from feishu.cardmd import CARD_TABLES_MAX, MARKDOWN_TABLES_MAX, dedent_fences, split_tables

TEXT_LIMIT_BYTES = 150 * 1024  # feishu.md §3.4: a text request body
RICH_LIMIT_BYTES = 30 * 1024  # post and card request bodies
BODY_OVERHEAD_BYTES = 512  # msg_type, uuid, reply_in_thread around the content
CARD_MIN_CHARS = 3000  # a Markdown answer longer than this reads better as a card
ZWSP = "\u200b"

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)\s*$")
_HEADING = re.compile(r"^#{1,6}\s+\S", re.M)
_BOLD = re.compile(r"\*\*[^*\n]+\*\*")
_LINK = re.compile(r"\[[^\]\n]+\]\((?:https?://|mailto:)[^)\s]+\)")
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)+\|?\s*$", re.M)
# Feishu parses these tags inside text, post md and card markdown; an answer that merely contains them
# (quoting a user, or an injected `<at user_id="all">`) must not ping anybody or restyle the message.
_FEISHU_TAG = re.compile(r"<(/?)(at|font|text_tag|link|person|local_datetime|number_tag|a|img)\b", re.I)
_AT_WRITTEN = re.compile(r"<at\s+(?:user_id|id|open_id)\s*=\s*\"?(ou_[\w-]+)\"?\s*>([^<]*)</at>", re.I)
_AT_ID = re.compile(r"(?<![\w@])@(ou_[0-9A-Za-z_-]+)")


@dataclass(frozen=True)
class Chunk:
    """One message to post: `msg_type` and its content object (serialised once, by the adapter)."""

    msg_type: str  # text | post | interactive
    content: dict[str, Any]

    def body_bytes(self) -> int:
        """The request body's size as Feishu measures it (content is a JSON string inside JSON)."""
        inner = json.dumps(self.content, ensure_ascii=False)
        return len(json.dumps({"content": inner}, ensure_ascii=False).encode()) + BODY_OVERHEAD_BYTES


def render(answer: str, people: Mapping[str, str] | None = None, *, chunk_chars: int = 3500) -> list[Chunk]:
    """The messages that show `answer`, in order. `people`: open_id → display name of those in the
    conversation (the batch's senders and the people it mentioned); only they become real mentions."""
    people = dict(people or {})
    style = choose_style(answer)
    if style == "text":
        return [Chunk("text", {"text": _with_mentions(part, people, "text")})
                for part in _text_parts(answer, chunk_chars)]
    limit = RICH_LIMIT_BYTES
    out: list[Chunk] = []
    for part in split_markdown(dedent_fences(answer), chunk_chars):
        # a card takes CARD_TABLES_MAX tables at most (more: Feishu refuses it): the rest go in the next card
        for piece in split_tables(part, CARD_TABLES_MAX) if style == "interactive" else [part]:
            out.extend(_fit(piece, people, style, limit))
    return out


def choose_style(answer: str) -> str:
    """`text` unless the answer uses Markdown; a card for tables and long answers, else a post."""
    if not looks_like_markdown(answer):
        return "text"
    return "interactive" if _TABLE_SEP.search(answer) or len(answer) > CARD_MIN_CHARS else "post"


def looks_like_markdown(text: str) -> bool:
    """Conservative: plain chat text (even with a lone `-` line) stays a `text` message."""
    if any(_FENCE.match(line) for line in text.splitlines()) or _HEADING.search(text) or _TABLE_SEP.search(text):
        return True
    if _BOLD.search(text) or _LINK.search(text) or _INLINE_CODE.search(text):
        return True
    lines = text.splitlines()
    return any(_LIST_ITEM.match(a) and _LIST_ITEM.match(b) for a, b in pairwise(lines))


def _text_parts(answer: str, chunk_chars: int) -> list[str]:
    parts = chunk_text(answer, limit=chunk_chars) or [answer]
    room = TEXT_LIMIT_BYTES - BODY_OVERHEAD_BYTES
    return [p for part in parts for p in (_hard_split(part, room) if _escaped_bytes(part) > room else [part])]


def _escaped_bytes(text: str) -> int:
    """Bytes of `text` as a JSON string inside a JSON string (how a message's content travels)."""
    return len(json.dumps(json.dumps(text, ensure_ascii=False), ensure_ascii=False).encode())


def _fit(part: str, people: Mapping[str, str], style: str, limit: int) -> list[Chunk]:
    """Build the chunk; if escaping pushed it over Feishu's limit, split it again (rare: dense quotes)."""
    chunk = _build(part, people, style)
    if chunk.body_bytes() <= limit:
        return [chunk]
    smaller = split_markdown(part, max(len(part) // 2, 50))
    if len(smaller) < 2:  # cannot shrink by lines: cut the one line itself
        smaller = _hard_split(part, limit // 4)
    return [c for piece in smaller for c in _fit(piece, people, style, limit)]


def _build(md: str, people: Mapping[str, str], style: str) -> Chunk:
    text = _with_mentions(md, people, "card" if style == "interactive" else "post")
    if style == "interactive":
        card = new_card().config(wide_screen_mode=True)
        for element in split_tables(text, MARKDOWN_TABLES_MAX):  # one markdown element shows four tables at most
            card = card.markdown(element)
        return Chunk("interactive", card.to_dict())
    # One md row per prose run and per fenced block: Feishu clients may swallow md that follows a fence
    # in the same row (lark_oapi's native mode encodes that).
    return Chunk("post", markdown_to_post_ast(guard_tildes(text), tag_md_mode="native"))


_SINGLE_TILDE = re.compile(r"(?<!~)~(?!~)")
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def guard_tildes(md: str) -> str:
    """`md` rows read `~text~` as underline, so `cp ~/.bashrc ~/backup` would lose its tildes and underline the
    path between them. On a prose line with two single tildes or more, each word holding one becomes inline
    code: shown as written, whatever Feishu's escaping rules are. Code blocks and spans are left alone. Pure."""
    out, fence = [], None
    for line in md.split("\n"):
        opened = _FENCE.match(line)
        if opened:
            fence = None if fence and opened.group(1)[0] == fence else (fence or opened.group(1)[0])
        elif fence is None and len(_SINGLE_TILDE.findall(_CODE_SPAN.sub("", line))) >= 2:
            line = " ".join(_code_if_tilde(word) for word in line.split(" "))
        out.append(line)
    return "\n".join(out)


def _code_if_tilde(word: str) -> str:
    if "`" in word or not _SINGLE_TILDE.search(word):
        return word
    return f"`{word}`"


def defuse(text: str) -> str:
    """Feishu-looking tags in the answer stay visible text: a zero-width space breaks the tag open."""
    return _FEISHU_TAG.sub(lambda m: f"<{ZWSP}{m.group(1)}{m.group(2)}", text)


def card_markdown(md: str, people: Mapping[str, str] | None = None) -> str:
    """`md` for a card's markdown element: real mentions only for `people`, every other Feishu tag defused, code
    fences at the start of their lines (feishu/cardmd.py)."""
    return _with_mentions(dedent_fences(md), dict(people or {}), "card")


def _with_mentions(text: str, people: Mapping[str, str], kind: str) -> str:
    """Real mentions for people in the conversation (`@ou_…`, or the model's own `<at …>`); every other
    Feishu-looking tag is defused. Placeholders keep the real tags away from the defusing."""
    made: list[str] = []

    def keep(open_id: str, name: str) -> str:
        shown = name or people.get(open_id, "")
        made.append(f"<at id={open_id}></at>" if kind == "card" else f'<at user_id="{open_id}">{shown}</at>')
        return f"\ue000{len(made) - 1}\ue001"

    def written(m: re.Match[str]) -> str:
        return keep(m.group(1), m.group(2)) if m.group(1) in people else f"@{m.group(2) or m.group(1)}"

    text = _AT_WRITTEN.sub(written, text.replace("\ue000", "").replace("\ue001", ""))
    text = _AT_ID.sub(lambda m: keep(m.group(1), "") if m.group(1) in people else m.group(0), defuse(text))
    return re.sub("\ue000(\\d+)\ue001", lambda m: made[int(m.group(1))], text)


def split_markdown(text: str, limit: int) -> list[str]:
    """Chunks of at most `limit` characters, in order, never cutting a fenced code block open: a block
    longer than a chunk is closed at the cut and reopened (same fence, same language) in the next one."""
    if len(text) <= limit:
        return [text]
    out: list[str] = []
    buf: list[str] = []
    size = 0
    fence: tuple[str, str] | None = None  # (marker, opening line) while inside a block
    for line in _lines(text, limit):
        m = _FENCE.match(line)
        closes = fence is not None and m is not None and m.group(1).startswith(fence[0][0]) \
            and len(m.group(1)) >= len(fence[0]) and not m.group(2)
        reserve = 0 if closes or fence is None else len(fence[0]) + 1  # room to close the block here
        if buf and size + len(line) + 1 + reserve > limit:
            out.append(_close(buf, fence))
            buf, size = ([fence[1]], len(fence[1])) if fence else ([], 0)
        elif buf and fence is None and size > limit * 0.8 and (not line.strip() or _HEADING.match(line)):
            out.append("\n".join(buf))  # near full: break at a paragraph or before a heading
            buf, size = [], 0
        if buf or line.strip():
            buf.append(line)
            size += len(line) + 1
        if m and fence is None:
            fence = (m.group(1), line.strip())
        elif closes:
            fence = None
    if buf:
        out.append("\n".join(buf))
    return [c for c in out if c.strip()]


def _close(buf: list[str], fence: tuple[str, str] | None) -> str:
    return "\n".join(buf) + (f"\n{fence[0]}" if fence else "")


def _lines(text: str, limit: int) -> Iterator[str]:
    """The text's lines, a line longer than a chunk (minus room for fences) cut into pieces."""
    room = max(limit - 16, 1)
    for line in text.split("\n"):
        if len(line) <= room:
            yield line
        else:
            yield from (line[i:i + room] for i in range(0, len(line), room))


def _hard_split(text: str, max_bytes: int) -> list[str]:
    """Pieces of `text` whose UTF-8 (JSON-escaped) size stays under `max_bytes`."""
    pieces: list[str] = []
    cur: list[str] = []
    cur_bytes = 0
    for ch in text:
        cost = _escaped_bytes(ch) - 4
        if cur and cur_bytes + cost > max_bytes:
            pieces.append("".join(cur))
            cur, cur_bytes = [], 0
        cur.append(ch)
        cur_bytes += cost
    if cur:
        pieces.append("".join(cur))
    return pieces or [text]


def plain_of(msg_type: str, content: Any) -> str:
    """What a message shows, as text: for the CLI and tests (tags and structure flattened)."""
    if isinstance(content, str):
        content = json.loads(content)
    if msg_type == "text":
        return str(content.get("text", ""))
    if msg_type == "post":
        body = next((v for v in content.values() if isinstance(v, dict) and "content" in v), content)
        rows = body.get("content") or []
        return "\n".join("".join(str(e.get("text") or e.get("user_name") or "") for e in row) for row in rows)
    if msg_type == "interactive":
        elements = (content.get("body") or {}).get("elements") or content.get("elements") or []
        return "\n".join(str(e.get("content", "")) for e in elements if isinstance(e, dict))
    return json.dumps(content, ensure_ascii=False)
