"""`make eval` offline, in the suite (issue 34): every scenario recorded through a fresh stack passes its structure
checks and its rubric against the stand-in; and each structure check and rubric rule catches what it is for."""

from __future__ import annotations

import copy
from typing import Any

from evals import structure
from evals.rubric import NO_TOOL, Rubric, judge, language_of


def test_make_eval_passes_offline() -> None:
    from evals.run import run

    results, printed = run(keep=False)
    assert len(results) >= 12, printed
    assert all(r.ok for r in results), printed


def body(batch: str = '<message sender="ou_a" message_id="om_1" time="2026-12-01T09:00:00+08:00">\n问\n</message>',
         context: str = "<turn_context>\n<now>2026-12-01T09:00+08:00 Tue</now>\n</turn_context>") -> dict[str, Any]:
    mark = {"type": "ephemeral"}
    return {"model": "m", "max_tokens": 10,
            "system": [{"type": "text", "text": "rules", "cache_control": mark}],
            "tools": [{"name": "t", "description": "Reads a thing and returns it; use it when the answer needs the "
                       "thing, not otherwise.", "input_schema": {"type": "object", "properties": {
                           "x": {"type": "string", "description": "which thing"}}}}],
            "messages": [{"role": "user", "content": "早先的问题"}, {"role": "assistant", "content": [
                {"type": "text", "text": "早先的回答", "cache_control": mark}]},
                {"role": "user", "content": [{"type": "text", "text": batch, "cache_control": mark},
                                             {"type": "text", "text": context}]}]}


def test_a_clean_request_passes_every_structure_check() -> None:
    assert structure.request_problems(body()) == []


def test_each_structure_check_catches_its_defect() -> None:
    unmarked = body()
    unmarked["messages"][-1]["content"][0].pop("cache_control")
    assert structure.breakpoints(unmarked) == ["the batch block is not a breakpoint"]
    five = body()
    for m in five["messages"][:1]:
        m["content"] = [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]
    five["messages"][-1]["content"][1]["cache_control"] = {"type": "ephemeral"}
    assert "5 cache breakpoints (at most 4)" in structure.breakpoints(five)
    vague = body()
    vague["tools"][0]["input_schema"]["properties"]["x"].pop("description")
    assert structure.described(vague) == ["t.x: no description"]
    root = '<thread_message sender="ou_a" message_id="om_1" time="2026-12-01T09:00:00+08:00">\n问\n</thread_message>'
    twice = body(context=f"<turn_context>{root}</turn_context>")
    assert structure.duplicates(twice) == ["message om_1 shown whole 2 times"]
    card = body(context="<turn_context>[interactive]</turn_context>")
    assert structure.placeholders(card) == ["a card shown as [interactive]"]
    epoch = body(batch='<message sender="ou_a" message_id="om_1" time="1764550800000">\n问\n</message>')
    assert structure.placeholders(epoch) == ['a time not in ISO 8601: time="1764550800000"']


def test_prefix_stability_and_one_tool_list_are_checked_across_requests() -> None:
    first = body()
    nxt = copy.deepcopy(first)
    nxt["messages"][-1]["content"] = nxt["messages"][-1]["content"][:1]
    nxt["messages"] += [{"role": "assistant", "content": "答"}, {"role": "user", "content": [
        {"type": "text", "text": '<message sender="ou_a" message_id="om_2">\n再问\n</message>'},
        {"type": "text", "text": "<turn_context/>"}]}]
    assert structure.prefix_kept(first, nxt) == []
    rewritten = copy.deepcopy(nxt)
    rewritten["messages"][-3]["content"][0]["text"] += "<now>changed</now>"  # the batch stored as it was not sent
    assert structure.prefix_kept(first, rewritten) == ["the batch block of message 2 is not kept as sent"]
    other = copy.deepcopy(first)
    other["tools"] = []
    assert structure.one_tool_list([first, nxt]) == [] and structure.one_tool_list([first, other]) != []


def test_the_rubric_judges_the_tool_its_arguments_and_what_is_said() -> None:
    call = [{"type": "tool_use", "id": "t1", "name": "schedule_followup", "input": {"message_id": "om_1"}}]
    rubric = Rubric(tool="schedule_followup", args={"message_id": lambda v, _b: v == "om_1"})
    assert judge(rubric, call, {}) == []
    assert judge(Rubric(tool="schedule_followup", args={"message_id": lambda v, _b: v == "om_2"}), call, {}) == \
        ['schedule_followup.message_id = "om_1"']
    assert judge(Rubric(tool=NO_TOOL), call, {}) == ["called schedule_followup (expected no tool call)"]
    said = [{"type": "text", "text": "请问具体是哪天？"}]
    assert judge(Rubric(tool=NO_TOOL, must_say=("哪天",), must_not_say=("A7731",), language="zh"), said, {}) == []
    assert judge(Rubric(language="en"), said, {}) == ["answers in zh (expected en)"]
    assert language_of("Received. I will answer in English.") == "en"
