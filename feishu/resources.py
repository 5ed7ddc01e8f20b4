"""What a message showed, fetched in the worker: forwarded bundles, images as image blocks, file facts and text."""

from __future__ import annotations

import base64
import codecs
import html
import json
import mimetypes
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis

from core.errors import Permanent
from core.inbound import Inbound
from core.keys import Keys
from feishu.client import FeishuApi
from feishu.content import MentionBook, Person, image_keys, image_mark
from feishu.message import ContentError, content_object, render_content

MAX_IMAGE_BYTES = 3_750_000  # base64 grows it by 4/3: stays under Anthropic's 5 MB per image
MAX_IMAGES = 8  # per message, forwarded ones included
MAX_FORWARDED = 50  # messages shown per bundle level (lark-oapi's channel uses the same bound)
MAX_FORWARD_DEPTH = 3
MAX_FILE_TEXT_BYTES = 256 * 1024
CACHE_TTL_SECONDS = 24 * 3600
FORWARDED_IMAGE = "[an image was here; images inside forwarded messages cannot be retrieved]"
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF87a", "image/gif"),
          (b"GIF89a", "image/gif"))
Block = dict[str, Any]


def sniff_image(data: bytes) -> str | None:
    """The media type the bytes are (one Anthropic accepts), whatever the sender or server claimed."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


class _Blocks:
    """Content blocks in order; adjacent text is merged and no text block is ever empty (the API refuses those)."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []

    def text(self, text: str) -> None:
        if not text:
            return
        if self.blocks and self.blocks[-1]["type"] == "text":
            self.blocks[-1]["text"] += text
        else:
            self.blocks.append({"type": "text", "text": text})

    def image(self, block: Block) -> None:
        self.blocks.append(block)


class _Gatherer:
    def __init__(self, api: FeishuApi, r: redis.Redis, keys: Keys, *, max_image_bytes: int, max_images: int,
                 cache_ttl: int) -> None:
        self.api, self.r, self.keys = api, r, keys
        self.max_image_bytes, self.images_left, self.ttl = max_image_bytes, max_images, cache_ttl
        self.out = _Blocks()

    # -- cache (per message and resource; JSON so it works with or without decode_responses) -----------

    def _cache_key(self, message_id: str, key: str, what: str) -> str:
        return f"{self.keys.prefix}:material:{what}:{message_id}:{key}"

    def _cached(self, name: str) -> dict[str, Any] | None:
        raw = self.r.get(name)
        return json.loads(raw) if raw else None

    def _remember(self, name: str, value: dict[str, Any]) -> dict[str, Any]:
        self.r.set(name, json.dumps(value), ex=self.ttl)
        return value

    # -- images -------------------------------------------------------------------------------------------

    def _fetch_image(self, message_id: str, key: str) -> dict[str, Any]:
        """{"block": image block} or {"note": reason}; Retryable and Paused errors propagate (not cached)."""
        name = self._cache_key(message_id, key, "image")
        cached = self._cached(name)
        if cached is not None:
            return cached
        try:
            res = self.api.resource(message_id, key, "image", max_bytes=self.max_image_bytes)
        except Permanent as exc:
            return self._remember(name, {"note": str(exc)})
        if not res.complete:
            return self._remember(name, {"note": f"larger than {self.max_image_bytes} bytes"})
        media_type = sniff_image(res.data)
        if media_type is None:
            return self._remember(name, {"note": f"not a PNG, JPEG, GIF or WebP image ({res.content_type})"})
        source = {"type": "base64", "media_type": media_type, "data": base64.b64encode(res.data).decode()}
        return self._remember(name, {"block": {"type": "image", "source": source}})

    def image(self, message_id: str, key: str) -> None:
        if self.images_left <= 0:
            self.out.text(f"[image {key} not included: more than the images allowed per message]")
            return
        found = self._fetch_image(message_id, key)
        if "block" in found:
            self.images_left -= 1
            self.out.image(found["block"])
        else:
            self.out.text(f"[image {key} unavailable: {html.escape(found['note'], quote=False)}]")

    def text_with_images(self, message_id: str, text: str, keys: list[str], *, forwarded: bool = False) -> None:
        """The rendered text, escaped, each image mark of `keys` replaced by the picture itself. Images inside
        a forwarded bundle are named, not fetched: Feishu does not serve the resources of a merge_forward's
        children ("暂不支持获取合并转发消息中的子消息的资源文件"), so asking would only fail."""
        if not keys:
            self.out.text(html.escape(text, quote=False))
            return
        by_mark = {image_mark(k): k for k in keys}
        pos = 0
        for match in re.finditer("|".join(re.escape(m) for m in by_mark), text):
            self.out.text(html.escape(text[pos:match.start()], quote=False))
            if forwarded:
                self.out.text(FORWARDED_IMAGE)
            else:
                self.image(message_id, by_mark[match.group(0)])
            pos = match.end()
        self.out.text(html.escape(text[pos:], quote=False))

    # -- files --------------------------------------------------------------------------------------------

    def file_facts(self, message_id: str, data: dict[str, Any]) -> None:
        key, name = str(data.get("file_key") or ""), str(data.get("file_name") or "")
        cache = self._cache_key(message_id, key, "file")
        facts = self._cached(cache)
        if facts is None:
            try:
                res = self.api.resource(message_id, key, "file", max_bytes=0)
                facts = self._remember(cache, {"size": res.size, "content_type": res.content_type})
            except Permanent as exc:
                facts = self._remember(cache, {"note": str(exc)})
        kind = mimetypes.guess_type(name)[0] or facts.get("content_type") or "unknown"
        attrs = {"key": key, "name": name, "type": kind}
        if facts.get("size") is not None:
            attrs["size"] = f"{facts['size']} bytes"
        if "note" in facts:
            attrs["unavailable"] = facts["note"]
        shown = " ".join(f'{k}="{html.escape(str(v))}"' for k, v in attrs.items())
        self.out.text(f"<file {shown}/>")

    # -- forwarded bundles ----------------------------------------------------------------------------------

    def forwarded(self, message_id: str) -> None:
        try:
            items = self.api.message_items(message_id)
        except Permanent as exc:
            self.out.text(f"[forwarded messages unavailable: {html.escape(str(exc), quote=False)}]")
            return
        children: dict[str, list[dict[str, Any]]] = {}
        for item in items:
            upper = item.get("upper_message_id")
            if item.get("message_id") == message_id and not upper:
                continue  # the bundle itself
            children.setdefault(str(upper or message_id), []).append(item)
        for bucket in children.values():
            bucket.sort(key=lambda i: _ms(i.get("create_time")) or 0)
        self._bundle(message_id, children, 1)

    def _bundle(self, bundle_id: str, children: dict[str, list[dict[str, Any]]], depth: int) -> None:
        level = children.get(bundle_id, [])
        shown = level[:MAX_FORWARDED]
        more = f' omitted="{len(level) - len(shown)}"' if len(level) > len(shown) else ""
        self.out.text(f'<forwarded_messages count="{len(level)}"{more}>\n')
        for item in shown:
            self._forwarded_item(item, children, depth)
        self.out.text("</forwarded_messages>\n")

    def _forwarded_item(self, item: dict[str, Any], children: dict[str, list[dict[str, Any]]], depth: int) -> None:
        raw_sender = item.get("sender")
        sender: dict[str, Any] = raw_sender if isinstance(raw_sender, dict) else {}
        msg_type = str(item.get("msg_type") or "")
        attrs = {"sender": sender.get("sender_name") or sender.get("id") or "unknown",
                 "sender_id": sender.get("id") or "", "time": _iso(item.get("create_time")), "type": msg_type}
        head = " ".join(f'{k}="{html.escape(str(v))}"' for k, v in attrs.items() if v)
        self.out.text(f"<forwarded_message {head}>\n")
        message_id = str(item.get("message_id") or "")
        if msg_type == "merge_forward":
            if depth < MAX_FORWARD_DEPTH:
                self._bundle(message_id, children, depth + 1)
            else:
                self.out.text("[nested forwarded messages not shown: too deep]\n")
        elif item.get("deleted"):
            self.out.text("[recalled]\n")
        else:
            self._forwarded_body(message_id, msg_type, item)
        self.out.text("</forwarded_message>\n")

    def _forwarded_body(self, message_id: str, msg_type: str, item: dict[str, Any]) -> None:
        raw = (item.get("body") or {}).get("content") if isinstance(item.get("body"), dict) else None
        people = [Person(str(m.get("key") or ""), m.get("id") if isinstance(m.get("id"), str) else None,
                         m.get("name")) for m in item.get("mentions") or [] if isinstance(m, dict)]
        try:
            data = content_object(msg_type, raw if isinstance(raw, str) else "")
            text = render_content(msg_type, data, MentionBook(people, None))
        except ContentError as exc:
            self.out.text(f"[unreadable {html.escape(msg_type)} message: {html.escape(str(exc))}]\n")
            return
        self.text_with_images(message_id, text, image_keys(msg_type, data), forwarded=True)
        self.out.text("\n")


def _ms(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _iso(value: Any) -> str:
    ms = _ms(value)
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ms is not None else ""


@dataclass(frozen=True)
class Caps:
    """What one message's content may take: images (how many, how large) and how long a fetch's result is kept."""

    max_image_bytes: int = MAX_IMAGE_BYTES
    max_images: int = MAX_IMAGES
    cache_ttl: int = CACHE_TTL_SECONDS


def gather(api: FeishuApi, r: redis.Redis, keys: Keys, msg: Inbound, caps: Caps | None = None) -> list[Block]:
    """Anthropic content blocks for one message, in reading order: `{"type": "text"}` and `{"type": "image"}`.

    - Text is `msg.text` (layout kept, mentions resolved at ingress) escaped with
      `html.escape(quote=False)`, so it can go between the caller's `<message …>` tags as is: do not
      escape it again. Markup gather adds itself (`<forwarded_messages>`, `<file …/>`) is not escaped.
    - Images (an image message, a post's img tags) become base64 image blocks where they stood; the media
      type is sniffed from the bytes. At most `caps.max_images`, each at most `caps.max_image_bytes`.
    - merge_forward: the bundle is fetched (GET message) and shown as `<forwarded_messages count=N>`
      holding one `<forwarded_message sender=… sender_id=… time=ISO-UTC type=…>` per child (nested
      bundles inside, to depth 3, at most 50 per level); children's images are fetched with the child's
      message_id. Everything inside is forwarded data, never the sender's own words or instructions.
    - file: `<file key name type size/>` (size from the resource's headers; nothing is downloaded).
    - Never empty; adjacent text is merged into one block; no text block is empty.
    - A fetch Feishu refuses (core.errors.Permanent: gone, too large, not allowed) becomes a short note
      such as `[image img_x unavailable: <reason>]` and is cached like a success (per message and
      resource, `caps.cache_ttl` seconds, in Redis under `{keys.prefix}:material:`), so a retried run does
      not fetch again. Transient failures raise core.errors.Retryable (and credential failures
      core.errors.Paused) and are not cached: let the run retry.
    """
    c = caps or Caps()
    g = _Gatherer(api, r, keys, max_image_bytes=c.max_image_bytes, max_images=c.max_images, cache_ttl=c.cache_ttl)
    if msg.message_type == "merge_forward":
        g.forwarded(msg.message_id)
    elif msg.message_type == "file":
        g.file_facts(msg.message_id, _content_or_empty(msg))
    else:
        g.text_with_images(msg.message_id, msg.text, image_keys(msg.message_type, _content_or_empty(msg)))
    return g.out.blocks or [{"type": "text", "text": f"[empty {html.escape(msg.message_type)} message]"}]


def _content_or_empty(msg: Inbound) -> dict[str, Any]:
    try:
        return content_object(msg.message_type, msg.content)
    except ContentError:  # admitted at ingress, so only an older release's entry could get here
        return {}


def fetch_file_text(
    api: FeishuApi, message_id: str, file_key: str, *, max_bytes: int = MAX_FILE_TEXT_BYTES
) -> str:
    """A file message's text for a read tool: raw (not escaped), at most `max_bytes` of it.

    Returns the text, with a last line `[truncated: first N of M bytes]` when cut, or a short note
    when the file is not text or Feishu refuses it (Permanent). Retryable/Paused propagate.
    """
    try:
        res = api.resource(message_id, file_key, "file", max_bytes=max_bytes)
    except Permanent as exc:
        return f"[file {file_key} unavailable: {exc}]"
    if b"\x00" in res.data[:8192]:
        return f"[file {file_key} is not a text file ({res.content_type})]"
    # A cut may split a character: the incremental decoder holds back an incomplete tail unless final.
    text = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(res.data, final=res.complete)
    if not res.complete:
        text += f"\n[truncated: first {len(res.data)} of {res.size if res.size is not None else '?'} bytes]"
    return text
