"""Context assembly: budget, alternation, attribution (pure)."""

from __future__ import annotations

from bot.envelope import Inbound
from memory.context import Entry, assemble, estimate_tokens, fit_history, format_batch, system_blocks


def entry(role: str, text: str) -> Entry:
    return Entry(role=role, text=text)


def test_history_fits_budget_and_keeps_newest() -> None:
    history = [entry("user" if i % 2 == 0 else "assistant", f"turn {i} " + "x" * 300) for i in range(20)]
    kept = fit_history(history, available=estimate_tokens(history[-1]["text"]) * 4 + 1)
    assert kept and len(kept) <= 4
    assert kept[-1]["text"].startswith("turn 19")
    assert kept[0]["role"] == "user"


def test_messages_alternate_and_end_with_the_batch() -> None:
    history = [entry("assistant", "orphan"), entry("user", "a"), entry("user", "b"), entry("assistant", "c")]
    messages = assemble(history, "NOW", budget=10_000, output_reserve=100)
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "user"]
    assert messages[0]["content"] == "a\nb"
    assert messages[-1]["content"] == "NOW"


def test_zero_budget_still_sends_the_batch() -> None:
    messages = assemble([entry("user", "a"), entry("assistant", "b")], "NOW", budget=0, output_reserve=0)
    assert messages == [{"role": "user", "content": "NOW"}]


def test_batch_attributes_each_sender() -> None:
    batch = [
        Inbound(event_id="e1", message_id="om_1", chat_id="c", chat_type="group", sender_open_id="ou_a",
                sender_type="user", message_type="text", text="first", content=""),
        Inbound(event_id="e2", message_id="om_2", chat_id="c", chat_type="group", sender_open_id="ou_b",
                sender_type="user", message_type="text", text="second <b>", content="", parent_id="om_1"),
    ]
    text = format_batch(batch)
    assert text.index('sender="ou_a"') < text.index("first") < text.index('sender="ou_b"') < text.index("second")
    assert 'quotes="om_1"' in text


def test_system_prefix_is_cacheable_and_static() -> None:
    assert system_blocks() == system_blocks()
    assert system_blocks()[0]["cache_control"] == {"type": "ephemeral"}
