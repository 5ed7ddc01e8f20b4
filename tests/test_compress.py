"""Compression survivor check and budget arithmetic (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from claude.budget import (
    MAX_FACTOR,
    MIN_FACTOR,
    Budget,
    fit_session,
    keep_after_rotation,
    next_factor,
    raw_request_tokens,
)
from claude.prompt import Entry, estimate_tokens, session_messages
from memory.compress import compression_request, extract_facts, missing, restore, restore_within
from sandbox.claude.wire import compression_reply

PLANTED = Entry(role="user", text=(
    '<message sender="ou_alice" message_id="om_plant01">\n'
    "报表 v2.3.1 的数据延迟了一天。不是 ETL 任务的问题，是上游接口。导出失败：timeout error。"
    "根因还不确定。待确认：记录 recAbc123 的口径。\n</message>"))


def kinds(facts: list) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in facts:
        out.setdefault(f.kind, []).append(f.text)
    return out


def test_facts_are_extracted_verbatim() -> None:
    answer = Entry(role="assistant", text="It is not the cache. TODO: check om_x99 later.")
    got = kinds(extract_facts([PLANTED, answer]))
    assert {"om_plant01", "ou_alice", "recAbc123", "om_x99"} <= set(got["id"])
    assert "v2.3.1" in got["version"]
    assert "不是 ETL 任务的问题，是上游接口。" in got["negation"]
    assert "It is not the cache." in got["negation"]
    assert any("timeout error" in s for s in got["failure"])
    assert "根因还不确定。" in got["unknown"]
    assert "待确认：记录 recAbc123 的口径。" in got["open"]


def test_restore_appends_only_what_the_summary_dropped() -> None:
    facts = extract_facts([PLANTED])
    summary = "用户说报表延迟，记录 recAbc123。不是 ETL 任务的问题，是上游接口。"
    lost = missing(summary, facts)
    assert "recAbc123" not in [f.text for f in lost]
    restored = restore(summary, facts)
    assert restored.startswith(summary)
    assert missing(restored, facts) == []
    assert restored.count("不是 ETL 任务的问题") == 1  # kept by the model: not repeated
    assert restore(restored, facts) == restored  # idempotent


def test_a_second_rotation_does_not_nest_restored_lines() -> None:
    first = restore("摘要", extract_facts([PLANTED]))
    again = extract_facts([Entry(role="user", text=first)])
    assert all(not f.text.startswith("- [") for f in again)
    assert "待确认：记录 recAbc123 的口径。" in [f.text for f in again]


def test_the_stand_ins_summary_drops_facts_that_restore_brings_back() -> None:
    turns = [PLANTED, Entry(role="assistant", text="收到")]
    body = {"system": [{"type": "text", "text": "You compress the older part of a team chat: rules"}],
            "messages": compression_request(turns)}
    summary = compression_reply(body)
    assert summary is not None and "om_plant01" not in summary
    assert missing(restore(summary, extract_facts(turns)), extract_facts(turns)) == []
    assert compression_reply({"system": "other", "messages": [{"role": "user", "content": "hi"}]}) is None


def test_factor_is_an_ewma_and_stays_in_range() -> None:
    assert next_factor(1.0, 100, 100) == 1.0
    assert 1.0 < next_factor(1.0, 100, 150) < 1.5
    assert next_factor(1.0, 100, 100_000) <= 1.0 + 0.2 * (MAX_FACTOR - 1.0) + 1e-9  # one odd sample: one step
    f = g = 1.0
    for _ in range(100):
        f, g = next_factor(f, 100, 100_000), next_factor(g, 100_000, 1)
    assert abs(f - MAX_FACTOR) < 1e-6 and abs(g - MIN_FACTOR) < 1e-6
    assert next_factor(1.3, 0, 50) == 1.3


def turns(n: int, size: int) -> list[Entry]:
    return [Entry(role="user" if i % 2 == 0 else "assistant", text=f"t{i} " + "x" * size) for i in range(n)]


SYSTEM = [{"type": "text", "text": "s" * 900}]


@given(n=st.integers(0, 40), size=st.integers(0, 3000), batch=st.integers(1, 20000),
       summary=st.integers(0, 5000), factor=st.floats(MIN_FACTOR, MAX_FACTOR))
def test_no_request_exceeds_the_budget(n: int, size: int, batch: int, summary: int, factor: float) -> None:
    b = Budget(total=2000, reserve=256, factor=factor)
    fixed = b.request_cost(SYSTEM, [])
    fitted = fit_session(b, fixed, "S" * summary, turns(n, size), "b" * batch)
    messages = session_messages(fitted.summary, fitted.turns, fitted.batch)
    assert b.scaled(raw_request_tokens(SYSTEM, messages)) <= b.total  # input tokens: the output reserve is apart
    assert messages[-1]["role"] == "user" and fitted.batch in messages[-1]["content"]
    assert not fitted.turns or fitted.turns[0]["role"] == "user"  # a kept part never starts mid-turn
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"] * (len(roles) % 2)


def test_an_oversized_batch_is_cut_with_a_marker() -> None:
    b = Budget(total=2000, reserve=256)
    fitted = fit_session(b, b.request_cost(SYSTEM, []), "", [], "y" * 50_000)
    assert fitted.batch.startswith("yyy") and "截断" in fitted.batch and len(fitted.batch) < 50_000


def test_what_does_not_fit_is_reported_so_the_session_rotates() -> None:
    b = Budget(total=4000, reserve=256)
    fixed = b.request_cost(SYSTEM, [])
    assert fit_session(b, fixed, "", turns(4, 100), "hi").dropped == 0
    many = turns(40, 300)
    fitted = fit_session(b, fixed, "", many, "hi")
    assert fitted.dropped > 0 and fitted.turns == many[fitted.dropped:]
    keep = keep_after_rotation(b, fixed, b.cost("hi"), many)
    assert 0 < keep < len(many) - fitted.dropped  # room to grow after the rotation
    assert many[len(many) - keep]["role"] == "user"


def test_summary_leads_the_request_and_a_lone_summary_joins_the_batch() -> None:
    assert session_messages("SUM", [], "NOW") == [{"role": "user", "content": "SUM\nNOW"}]
    messages = session_messages("SUM", [Entry(role="user", text="q"), Entry(role="assistant", text="a")], "NOW")
    assert messages == [{"role": "user", "content": "SUM\nq"}, {"role": "assistant", "content": "a"},
                        {"role": "user", "content": "NOW"}]


def test_restored_facts_stay_within_the_summarys_room_newest_and_meaningful_first() -> None:
    turns = [Entry(role="user", text=f'<message sender="ou_a" message_id="om_{i:04d}">第{i}轮：不是模块{i}的问题。'
                                     "</message>") for i in range(300)]
    facts = extract_facts(turns)
    text = restore_within("摘要", facts, estimate_tokens, 600)
    assert estimate_tokens(text) <= 600
    assert "不是模块299的问题" in text and "不是模块0的问题" not in text  # the newest negations first
    assert "较早的要点未列出" in text  # what did not fit is counted
    ids = restore_within("摘要", extract_facts(turns[:40]), estimate_tokens, 900)
    assert "om_0000" in ids and "om_0039" not in ids  # with room to spare, the oldest ids come first
    assert restore_within("摘要", facts, estimate_tokens, 10**6) == restore("摘要", facts)  # room for all


@pytest.mark.parametrize("total, reserve, fixed, room", [
    (3000, 2048, 1000, 2000),  # the contract's example: a large output reserve leaves the input budget whole
    (24000, 2048, 1325, 22675),
    (2000, 256, 2500, 0),
])
def test_the_budget_is_input_tokens_and_the_output_reserve_is_apart(total: int, reserve: int, fixed: int,
                                                                      room: int) -> None:
    assert Budget(total=total, reserve=reserve).input_room(fixed) == room
