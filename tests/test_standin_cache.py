"""The stand-in's prompt cache reports usage the way the Messages API does (sandbox/claude/cache.py). Pure."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.claude.cache import PromptCache, TooManyBreakpoints, blocks_of, minimum_for, total_tokens

MODEL = "claude-sonnet-5-5"
LONG = "Rules of the house. " * 400  # ~2,000 tokens by the stand-in's count: above Sonnet's 1,024 minimum
MARK = {"type": "ephemeral"}


def body(messages: list[dict[str, Any]], *, system: str = LONG, tools: list[dict[str, Any]] | None = None,
         **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 100, "system": [{"type": "text", "text": system, "cache_control": MARK}],
            "tools": tools or [], "messages": messages, **extra}


def user(text: str, cached: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if cached:
        block["cache_control"] = MARK
    return {"role": "user", "content": [block]}


def test_the_three_fields_add_up_and_input_is_what_follows_the_last_breakpoint() -> None:
    cache = PromptCache(clock=lambda: 0.0)
    first = body([user("你好" * 50)])
    used = cache.use(first)
    assert used.cache_read_input_tokens == 0 and used.cache_creation_input_tokens > 1024
    assert used.total == total_tokens(first)
    again = cache.use(first)
    assert again.cache_read_input_tokens == used.cache_creation_input_tokens and again.cache_creation_input_tokens == 0
    assert again.input_tokens == used.input_tokens  # the user turn after the breakpoint, billed fresh each time


def test_a_prefix_below_the_models_minimum_is_never_cached() -> None:
    cache = PromptCache(clock=lambda: 0.0)
    small = body([user("hi")], system="You are a bot.")
    for _ in range(2):
        used = cache.use(small)
        assert used.cache_read_input_tokens == used.cache_creation_input_tokens == 0
    assert minimum_for("claude-haiku-4-5") == 4096 and minimum_for("claude-opus-5-5") == 512
    assert minimum_for(MODEL) == 1024


def test_the_end_of_history_is_found_by_the_next_requests_lookback() -> None:
    """A conversation marked at its end: the next turn reads everything the last one wrote, and writes its own
    growth; a changed earlier message (history rewritten) reads only up to the system prompt."""
    cache = PromptCache(clock=lambda: 0.0)
    turn1 = [user("第一轮" * 100, cached=True)]
    cache.use(body(turn1))
    turn2 = [user("第一轮" * 100), {"role": "assistant", "content": "答一"}, user("第二轮", cached=True)]
    used = cache.use(body(turn2))
    first_total = total_tokens(body(turn1))
    assert used.cache_read_input_tokens == first_total
    assert used.cache_creation_input_tokens == total_tokens(body(turn2)) - first_total
    rewritten = [user("第一轮（改过）" * 100), {"role": "assistant", "content": "答一"}, user("第二轮", cached=True)]
    system_only = blocks_of(body(turn1))[0].tokens
    assert cache.use(body(rewritten)).cache_read_input_tokens == system_only


def test_lookback_stops_after_twenty_blocks() -> None:
    cache = PromptCache(clock=lambda: 0.0)
    head = [user("x" * 200, cached=True)]
    cache.use(body(head))
    tail = [{"role": "assistant", "content": f"a{i}"} if i % 2 == 0 else user(f"u{i}") for i in range(25)]
    far = [user("x" * 200), *tail]
    far[-1] = user("end", cached=True)
    assert cache.use(body(far)).cache_read_input_tokens == blocks_of(body(head))[0].tokens  # only the system's


def test_entries_expire_after_their_ttl_and_a_hit_refreshes_them() -> None:
    now = [0.0]
    cache = PromptCache(clock=lambda: now[0])
    request = body([user("q")])
    cache.use(request)
    now[0] = 299.0
    assert cache.use(request).cache_read_input_tokens > 0  # refreshed at 299
    now[0] = 598.0
    assert cache.use(request).cache_read_input_tokens > 0
    now[0] = 900.0
    assert cache.use(request).cache_read_input_tokens == 0


def test_tool_choice_changes_only_the_messages_cache() -> None:
    cache = PromptCache(clock=lambda: 0.0)
    tools = [{"name": "t", "description": "d", "input_schema": {"type": "object", "properties": {}}}]
    messages = [user("问题" * 300, cached=True)]
    cache.use(body(messages, tools=tools))
    final = cache.use(body(messages, tools=tools, tool_choice={"type": "none"}))
    upto_system = sum(b.tokens for b in blocks_of(body(messages, tools=tools))[:2])
    assert final.cache_read_input_tokens == upto_system


def test_top_level_cache_control_marks_the_last_block_and_five_breakpoints_are_refused() -> None:
    cache = PromptCache(clock=lambda: 0.0)
    auto = {"model": MODEL, "max_tokens": 1, "system": LONG, "messages": [user("q")], "cache_control": MARK}
    cache.use(auto)
    assert cache.use(auto).cache_read_input_tokens == total_tokens(auto)
    five = body([user(f"m{i}", cached=True) if i % 2 == 0 else {"role": "assistant", "content": "a"}
                 for i in range(9)])
    with pytest.raises(TooManyBreakpoints):
        blocks_of(five)
