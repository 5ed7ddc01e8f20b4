"""The prompt cache as the Messages API keeps it, so the stand-in's `usage` says what a real request would read.

What the stand-in follows (Anthropic's "Prompt caching" guide, docs.claude.com/en/docs/build-with-claude/
prompt-caching, sections "How prompt caching works", "How automatic prefix checking works", "Cache limitations",
"Tracking cache performance", "Mixing different TTLs", "What invalidates the cache"; the SDK's
`MessageCreateParams.cache_control`: "Top-level cache control automatically applies a cache_control marker to the
last cacheable block in the request"):
- the prefix is `tools`, then `system`, then `messages`, block by block; a block's cache key hashes every block
  before it and itself (cumulative), never the `cache_control` markers themselves;
- at most 4 breakpoints (a 400 beyond); a top-level `cache_control` marks the last block;
- for each breakpoint the API checks backwards from it, at most 20 blocks, for the longest prefix already cached;
- `cache_read_input_tokens` = the tokens up to the highest hit (A); `cache_creation_input_tokens` = from A to the
  last breakpoint (C), written now; `input_tokens` = the tokens after the last breakpoint;
- a prefix shorter than the model's minimum cacheable length is neither written nor read (no error);
- an entry lives 5 minutes (`ttl: "1h"`: an hour) and each hit refreshes it;
- a change of `tool_choice` invalidates the messages' cache, not the tools' and the system's.

Tokens are the stand-in's own count (JSON characters / 4, an image at 1,600), per block, so the three usage fields
always add up to the request's total (`total_tokens`). Minimum lengths per model family follow the published table
(Opus 5 / Fable 5 / Mythos 5: 512; Sonnet 5, Opus 4.8, Sonnet 4.x: 1,024; Haiku 4.5, Opus 4.5/4.6: 4,096 — as quoted
in LiteLLM's prompt-caching page, docs.litellm.ai/docs/completion/prompt_caching, Oct 2026).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_BREAKPOINTS = 4
LOOKBACK = 20
IMAGE_TOKENS = 1600
MESSAGE_FRAMING = 3  # a message's role and framing, counted on its first block
TTL_S = {"5m": 300.0, "1h": 3600.0}
MINIMUM = (("haiku", 4096), ("opus-4-5", 4096), ("opus-4-6", 4096), ("opus-5", 512), ("fable", 512),
           ("mythos", 512))
DEFAULT_MINIMUM = 1024  # Sonnet-class and the rest


class TooManyBreakpoints(ValueError):
    """More than four blocks carry `cache_control` (the API answers 400)."""


@dataclass(frozen=True)
class Block:
    key: str  # cumulative hash of the prefix up to and including this block
    tokens: int
    ttl: str | None  # "5m" / "1h" when the block is a breakpoint, else None


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int

    @property
    def total(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


def minimum_for(model: str) -> int:
    """The model's minimum cacheable prompt length in tokens."""
    name = model.lower()
    return next((n for family, n in MINIMUM if family in name), DEFAULT_MINIMUM)


def block_tokens(block: Any) -> int:
    if isinstance(block, dict) and block.get("type") == "image":
        return IMAGE_TOKENS
    return max(1, len(json.dumps(_bare(block), ensure_ascii=False)) // 4)


def _bare(block: Any) -> Any:
    """The block as the cache key sees it: without its cache_control marker."""
    return {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, dict) else block


def _ttl(block: Any) -> str | None:
    marker = block.get("cache_control") if isinstance(block, dict) else None
    return str(marker.get("ttl") or "5m") if isinstance(marker, dict) else None


def _parts(body: dict[str, Any]) -> list[tuple[str, Any, str | None]]:
    """(what the key adds, the block, its breakpoint's ttl) in the order the API caches them."""
    out: list[tuple[str, Any, str | None]] = []
    for tool in body.get("tools") or []:
        out.append(("tool", tool, _ttl(tool)))
    system = body.get("system")
    blocks = [{"type": "text", "text": system}] if isinstance(system, str) else list(system or [])
    for block in blocks:
        out.append(("system", block, _ttl(block)))
    choice = json.dumps(body.get("tool_choice") or {}, sort_keys=True)
    for n, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        items = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        for i, block in enumerate(items):
            head = f"message:{message.get('role')}:{choice if n == 0 else ''}" if i == 0 else "block"
            out.append((head, block, _ttl(block)))
    return out


def blocks_of(body: dict[str, Any]) -> list[Block]:
    """The request's blocks, each with its cumulative key, its tokens and whether it is a breakpoint."""
    digest = hashlib.sha256(str(body.get("model")).encode())
    out: list[Block] = []
    parts = _parts(body)
    automatic = _ttl(body) if isinstance(body.get("cache_control"), dict) else None
    for n, (head, block, ttl) in enumerate(parts):
        digest.update(head.encode())
        digest.update(json.dumps(_bare(block), ensure_ascii=False, sort_keys=True).encode())
        if automatic and n == len(parts) - 1 and ttl is None:
            ttl = automatic
        framing = MESSAGE_FRAMING if head.startswith("message:") else 0
        out.append(Block(digest.copy().hexdigest(), block_tokens(block) + framing, ttl))
    if sum(1 for b in out if b.ttl) > MAX_BREAKPOINTS:
        raise TooManyBreakpoints(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                                 f"Found {sum(1 for b in out if b.ttl)}.")
    return out


def total_tokens(body: dict[str, Any]) -> int:
    return max(1, sum(b.tokens for b in blocks_of(body)))


class PromptCache:
    """The cache entries one organisation's requests wrote: prefix key → expiry (on `clock`)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._entries: dict[str, tuple[float, float]] = {}  # key → (expires at, lifetime)
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def use(self, body: dict[str, Any]) -> Usage:
        """The usage of one request, reading what it hits and writing every breakpoint it marks."""
        blocks = blocks_of(body)
        total = sum(b.tokens for b in blocks)
        marks = [i for i, b in enumerate(blocks) if b.ttl]
        if not marks:
            return Usage(max(1, total), 0, 0)
        upto = [0] * len(blocks)
        running = 0
        for i, b in enumerate(blocks):
            running += b.tokens
            upto[i] = running
        least = minimum_for(str(body.get("model") or ""))
        with self._lock:
            now = self.clock()
            hit = self._highest_hit(blocks, marks, upto, least, now)
            read = upto[hit] if hit >= 0 else 0
            last = marks[-1]
            created = upto[last] - read if last > hit and upto[last] >= least else 0
            if hit >= 0:
                _, life = self._entries[blocks[hit].key]
                self._entries[blocks[hit].key] = (now + life, life)  # a hit refreshes its entry
            for i in marks:
                if upto[i] >= least and i > hit:
                    life = TTL_S.get(str(blocks[i].ttl), TTL_S["5m"])
                    self._entries[blocks[i].key] = (now + life, life)
        return Usage(max(0, total - read - created), created, read)

    def _highest_hit(self, blocks: list[Block], marks: list[int], upto: list[int], least: int, now: float) -> int:
        """The index of the longest cached prefix any breakpoint's lookback finds (-1: none)."""
        hit = -1
        for mark in marks:
            for j in range(mark, max(-1, mark - LOOKBACK), -1):
                if j <= hit:
                    break
                entry = self._entries.get(blocks[j].key)
                if entry is not None and entry[0] > now and upto[j] >= least:
                    hit = j
                    break
        return hit
