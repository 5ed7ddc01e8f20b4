"""Cards the bot posts (issue 14 B1): JSON 2.0 with lark-oapi's builder, defused like replies. Pure, plus the
emulator's card rules (which follow Feishu's JSON 2.0 breaking changes)."""

from __future__ import annotations

import json

import pytest

from feishu.cards import Proposal, answer_card, approval_card, buttons_of, elements_of, footer_of
from feishu.render import ZWSP
from sandbox.feishu.rules import FeishuError, check_card, validate_send

HOSTILE = '<at id=all></at> 请大家注意 <at user_id="ou_victim"></at> <font color="red">红</font>'


def _all_text(card: dict) -> str:
    return json.dumps(card, ensure_ascii=False)


def test_the_first_answer_is_a_json_2_card_that_patches_for_everyone() -> None:
    card = answer_card(item_id="itm_1", title="导出为空", status="full", version=3,
                       body="## 结论\n| a | b |\n|---|---|\n| 1 | 2 |\n> 引用 `code`", record_url="https://x/rec")
    assert card["schema"] == "2.0" and card["config"]["update_multi"] is True
    assert "wide_screen_mode" not in card["config"] and card["config"]["width_mode"] == "fill"
    assert "elements" not in card and card["body"]["elements"][0]["content"].startswith("## 结论")
    assert footer_of(card) == "事项 itm_1 · 第 3 版 · 完整分析"
    check_card(card)


@pytest.mark.parametrize("build", [
    lambda: answer_card(item_id="itm_1", title="t", status="summary", version=2, body=HOSTILE),
    lambda: approval_card(Proposal(proposal_id="prop_1", route_key="rk", item_id="itm_1", field="状态", value=HOSTILE,
                          reason=HOSTILE, proposer="ou_a")),
])
def test_model_text_in_a_card_cannot_mention_anyone_or_restyle_it(build) -> None:
    text = "\n".join(str(e.get("content", "")) for e in elements_of(build()))
    assert "<at " not in text and "<font" not in text
    assert f"<{ZWSP}at id=all>" in text  # still visible, as text


def test_approval_buttons_carry_their_callback_values_and_the_decider_is_a_real_mention() -> None:
    pending = approval_card(Proposal(proposal_id="prop_1", route_key="rk", item_id="itm_1", field="状态",
                                     value="已解决",
                            reason="修好了", proposer="ou_a"))
    assert [(label, value["action"]) for label, value in buttons_of(pending)] == [("批准", "items:approve"),
                                                                               ("拒绝", "items:reject")]
    check_card(pending)
    decided = approval_card(Proposal(proposal_id="prop_1", route_key="rk", item_id="itm_1", field="状态",
                                     value="已解决",
                            reason="", proposer="ou_a", state="approved", decided_by="ou_boss"))
    assert buttons_of(decided) == [] and "<at id=ou_boss></at>" in _all_text(decided)
    forged = approval_card(Proposal(proposal_id="p", route_key="rk", item_id="i", field="f", value="v", reason="",
                           proposer="ou_a", state="approved", decided_by="all></at><at id=all"))
    assert "<at id=all" not in _all_text(forged)


@pytest.mark.parametrize("card", [
    {"schema": "2.0", "config": {"update_multi": True}, "elements": [{"tag": "markdown", "content": "x"}]},
    {"schema": "2.0", "body": {"elements": [{"tag": "note", "elements": []}]}},
    {"schema": "2.0", "body": {"elements": [{"tag": "action", "actions": []}]}},
])
def test_the_emulator_refuses_1_0_modules_in_a_2_0_card(card: dict) -> None:
    body = {"msg_type": "interactive", "content": json.dumps(card)}
    with pytest.raises(FeishuError) as err:
        validate_send(body, 100)
    assert err.value.code == 200621
