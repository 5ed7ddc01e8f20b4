"""Anthropic Messages wire format for the stand-in: validation, replies, usage, SSE (runtime.md §3.9)."""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Iterator
from typing import Any

from sandbox.claude.cache import TooManyBreakpoints, blocks_of, total_tokens

REPLY_PREFIX = "收到。你说的是："
REMOVED_PARAMS = ("temperature", "top_p", "top_k")  # 400 since API version 2026-10-21
STREAM_CHUNK_CHARS = 16


class WireError(Exception):
    """A request the real API would reject; carries the HTTP status and the error.type."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message


def error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}, "request_id": request_id}


def stable_hash(body: Any) -> str:
    """Same request → same hash, so ids are reproducible across runs."""
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _invalid(message: str) -> WireError:
    return WireError(400, "invalid_request_error", message)


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise _invalid("messages: field required and must be a non-empty list")
    expected = "user"
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise _invalid(f"messages.{i}.role: must be 'user' or 'assistant'")
        if message["role"] != expected:
            raise _invalid(f"messages.{i}: roles must alternate user/assistant, starting with user")
        content = message.get("content")
        if not isinstance(content, str) and not (
            isinstance(content, list) and all(isinstance(b, dict) and "type" in b for b in content)
        ):
            raise _invalid(f"messages.{i}.content: must be a string or a list of content blocks")
        expected = "assistant" if expected == "user" else "user"


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list) or not all(
        isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) for b in system
    ):
        raise _invalid("system: must be a string or a list of text blocks")


def validate(body: Any, *, needs_max_tokens: bool = True) -> dict[str, Any]:
    """Reject what the 2026-10-21 API rejects; returns the body for chaining."""
    if not isinstance(body, dict):
        raise _invalid("request body must be a JSON object")
    for name in REMOVED_PARAMS:
        if name in body:
            raise _invalid(f"{name}: Extra inputs are not permitted")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _invalid("model: field required")
    if needs_max_tokens:
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise _invalid("max_tokens: field required and must be an integer >= 0")
    _check_messages(body.get("messages"))
    _check_system(body.get("system"))
    _check_tools(body.get("tools"))
    try:
        blocks_of(body)  # at most four cache_control breakpoints
    except TooManyBreakpoints as exc:
        raise _invalid(str(exc)) from None
    return body


# Anthropic-defined tools the API accepts by type (the client runs them: the memory tool's commands come back as
# tool_use blocks named after the tool); a custom tool needs a name and an input_schema.
CLIENT_TOOL_TYPES = {"memory_20250818": "memory"}


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise _invalid("tools: must be a list")
    names = []
    for n, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise _invalid(f"tools.{n}: each tool needs a name")
        kind = tool.get("type")
        if kind in CLIENT_TOOL_TYPES:
            if tool["name"] != CLIENT_TOOL_TYPES[kind]:
                raise _invalid(f"tools.{n}.name: the {kind} tool must be named {CLIENT_TOOL_TYPES[kind]!r}")
        elif kind not in (None, "custom") or not isinstance(tool.get("input_schema"), dict):
            raise _invalid(f"tools.{n}: input_schema: field required")
        names.append(tool["name"])
    if len(names) != len(set(names)):
        raise _invalid("tools: tool names must be unique")


_UNAVAILABLE = re.compile(r"<tools_unavailable>(.*?)</tools_unavailable>", re.DOTALL)


def offered(body: dict[str, Any], name: str) -> bool:
    """Whether the request offers tool `name` and its turn may use it: listed in `tools` and not named in the turn's
    <tools_unavailable> (a model reads that and does not call it)."""
    if name not in {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}:
        return False
    for m in reversed(body.get("messages") or []):
        content = m.get("content")
        texts = block_text(content) if isinstance(content, (str, list)) else ""
        if m.get("role") == "user" and "<message " in texts:  # the turn's own message (not a tool result)
            found = _UNAVAILABLE.search(texts)
            return not (found and re.search(rf"(^|; ){re.escape(name)}:", found.group(1)))
    return True


_QUOTED = re.compile(r"<quoted\b[^>]*>.*?</quoted>(?: \(the rest: read_message[^)]*\))?\n?", re.DOTALL)


def without_quotes(text: str) -> str:
    """A message's own words: the <quoted> message it replies to is data, never the sender's request."""
    return _QUOTED.sub("", text)


def block_text(content: Any) -> str:
    """The text of a message's content: the string itself or its text blocks concatenated."""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def default_reply(body: dict[str, Any]) -> str:
    """The deterministic answer: it quotes the last user turn so tests can see what reached the model."""
    users = [m for m in body["messages"] if m.get("role") == "user"]
    return REPLY_PREFIX + _unwrapped(block_text(users[-1]["content"])) if users else REPLY_PREFIX


_MESSAGE_TAG = re.compile(r"<message\b[^>]*>\n?(.*?)\n?</message>", re.DOTALL)


def _unwrapped(text: str) -> str:
    """The user's words without the attribution tags a chat bot wraps them in, unescaped (readable replies)."""
    inner = _MESSAGE_TAG.findall(text)
    return " / ".join(html.unescape(without_quotes(part).strip()) for part in inner) if inner else text


def input_tokens(body: dict[str, Any]) -> int:
    """The request's input tokens as the stand-in counts them (per block: sandbox/claude/cache.py)."""
    return total_tokens(body)


def content_blocks(answer: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": answer}] if isinstance(answer, str) else list(answer)


def output_tokens(content: list[dict[str, Any]]) -> int:
    size = sum(len(b.get("text", "")) or len(json.dumps(b.get("input", {}))) for b in content)
    return max(1, size // 4) if content else 0


def stop_reason(content: list[dict[str, Any]], max_tokens: int) -> str:
    if max_tokens == 0:
        return "max_tokens"
    return "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"


def sse_frames(message: dict[str, Any]) -> Iterator[str]:
    """The event sequence of a streamed response, carrying exactly `message`'s content."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**usage, "output_tokens": 1}}
    yield _frame("message_start", {"type": "message_start", "message": start})
    yield _frame("ping", {"type": "ping"})
    for index, block in enumerate(message["content"]):
        yield from _block_frames(index, block)
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield _frame("message_delta", {"type": "message_delta", "delta": delta,
                                   "usage": {"output_tokens": usage["output_tokens"]}})
    yield _frame("message_stop", {"type": "message_stop"})


def _block_frames(index: int, block: dict[str, Any]) -> Iterator[str]:
    if block.get("type") == "tool_use":
        empty = {**block, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block.get("input", {}))}]
    else:
        empty = {**block, "text": ""}
        text = block.get("text", "")
        pieces = [text[i:i + STREAM_CHUNK_CHARS] for i in range(0, len(text), STREAM_CHUNK_CHARS)]
        deltas = [{"type": "text_delta", "text": piece} for piece in pieces]
    start = {"type": "content_block_start", "index": index, "content_block": empty}
    yield _frame("content_block_start", start)
    for delta in deltas:
        yield _frame("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
    yield _frame("content_block_stop", {"type": "content_block_stop", "index": index})


def _frame(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


COMPRESSION_MARKER = "You compress the older part of a team chat"  # how memory/compress.py's prompt opens
SUMMARY_CHARS_PER_TURN = 40
_TURN = re.compile(r'<turn role="(user|assistant)">\n?(.*?)\n?</turn>', re.DOTALL)


def compression_reply(body: dict[str, Any]) -> str | None:
    """A summary for a session-compression request, None for any other request.

    Deliberately lossy, like a careless model: the first SUMMARY_CHARS_PER_TURN characters of each user
    turn, no ids, nothing of what the assistant said, so the service's survivor check has facts to restore.
    """
    system = body.get("system")
    text = system if isinstance(system, str) else block_text(system or [])
    if COMPRESSION_MARKER not in text:
        return None
    users = [m for m in body["messages"] if m.get("role") == "user"]
    turns = _TURN.findall(block_text(users[-1]["content"])) if users else []
    notes = []
    for role, turn in turns:
        if role == "user":
            said = re.sub(r"\s+", " ", _unwrapped(turn)).strip()
            notes.append(f"- 用户提到：{said[:SUMMARY_CHARS_PER_TURN]}")
    return "摘要（沙盒模型）：\n" + "\n".join(notes or ["- （无）"])
