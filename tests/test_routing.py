"""Route keys and admission as tables of cases (pure functions, no fakes)."""

from __future__ import annotations

import pytest

from core.inbound import Inbound, Mention
from core.settings import ChatOverride
from routing.admission import IDENTITY_UNKNOWN, NO_SENDER_ID, admit
from routing.keys import route_for
from routing.policy import Policy

BOT = "ou_bot"


def inbound(**kw: object) -> Inbound:
    base: dict[str, object] = dict(
        event_id="ev1", message_id="om_1", chat_id="oc_g", chat_type="group", sender_open_id="ou_a",
        sender_type="user", message_type="text", text="hi", content='{"text":"hi"}',
    )
    base.update(kw)
    return Inbound.model_validate(base)


@pytest.mark.parametrize(("kw", "policy", "expected"), [
    ({"chat_type": "p2p", "chat_id": "oc_p"}, Policy(), "feishu:default:p2p:oc_p"),
    ({"chat_type": "p2p", "chat_id": "oc_p", "root_id": "om_r", "parent_id": "om_r"}, Policy(),
     "feishu:default:p2p:oc_p"),
    ({}, Policy(), "feishu:default:group:oc_g:ou_a"),
    ({"root_id": "om_r", "parent_id": "om_p"}, Policy(), "feishu:default:group:oc_g:ou_a"),
    ({"thread_id": "omt_1", "root_id": "om_r"}, Policy(), "feishu:default:topic:oc_g:omt_1"),
    ({"thread_id": "omt_1", "sender_open_id": "ou_b"}, Policy(), "feishu:default:topic:oc_g:omt_1"),
    ({}, Policy(group_scope="shared"), "feishu:default:group:oc_g"),
    ({"thread_id": "omt_1"}, Policy(topic_scope="per_sender"), "feishu:default:topic:oc_g:omt_1:ou_a"),
    ({}, Policy(overrides={"oc_g": ChatOverride(group_scope="shared")}), "feishu:default:group:oc_g"),
    ({"chat_id": "oc_other"}, Policy(overrides={"oc_g": ChatOverride(group_scope="shared")}),
     "feishu:default:group:oc_other:ou_a"),
])
def test_route_keys(kw: dict[str, object], policy: Policy, expected: str) -> None:
    assert route_for(inbound(**kw), policy, "default").key == expected


NO_OPEN_ID = {"sender_open_id": "", "sender_union_id": "on_u1", "sender_user_id": "e33ggbyz"}
ONLY_USER_ID = {"sender_open_id": "", "sender_user_id": "e33ggbyz"}


@pytest.mark.parametrize(("kw", "policy", "expected"), [
    (NO_OPEN_ID, Policy(), "feishu:default:group:oc_g:on_u1"),
    (ONLY_USER_ID, Policy(), "feishu:default:group:oc_g:e33ggbyz"),
    ({**NO_OPEN_ID, "thread_id": "omt_1"}, Policy(topic_scope="per_sender"), "feishu:default:topic:oc_g:omt_1:on_u1"),
    ({"sender_union_id": "on_u1"}, Policy(), "feishu:default:group:oc_g:ou_a"),  # open_id wins when present
    ({"sender_open_id": ""}, Policy(group_scope="shared"), "feishu:default:group:oc_g"),
])
def test_senders_without_open_id_get_their_own_route(kw: dict[str, object], policy: Policy, expected: str) -> None:
    assert route_for(inbound(**kw), policy, "default").key == expected


def test_senders_without_open_id_do_not_share_a_route() -> None:
    keys = {route_for(inbound(**kw), Policy(), "p").key for kw in (
        {"sender_open_id": "", "sender_union_id": "on_1"}, {"sender_open_id": "", "sender_union_id": "on_2"},
        {"sender_open_id": "", "sender_user_id": "u1"}, {"sender_open_id": "", "sender_user_id": "u2"})}
    assert len(keys) == 4


def test_a_per_sender_route_is_never_built_without_a_sender() -> None:
    with pytest.raises(ValueError):
        route_for(inbound(sender_open_id=""), Policy(), "p")


def test_entries_queued_by_the_previous_release_still_parse() -> None:
    old = ('{"event_id":"e","message_id":"om_1","chat_id":"oc_g","chat_type":"group","sender_open_id":"ou_a",'
           '"sender_type":"user","message_type":"text","text":"hi","content":"{\\"text\\":\\"hi\\"}",'
           '"create_time":"1700000000000","thread_id":null,"root_id":null,"parent_id":null,'
           '"mentions":[{"key":"@_user_1","open_id":"ou_bot","name":"bot"}],"mentioned_all":false}')
    parsed = Inbound.model_validate_json(old)
    assert parsed.sender_id == "ou_a"
    assert route_for(parsed, Policy(), "default").key == "feishu:default:group:oc_g:ou_a"
    # the dedupe key of an open_id sender is what the previous release computed
    assert parsed.content_key() == "aa804e6e1aa309f4b97336303931b359"


@pytest.mark.parametrize("kw", [{"chat_type": "p2p"}, {}, {"thread_id": "omt_1"}])
def test_kind_is_recoverable_from_the_key(kw: dict[str, object]) -> None:
    from routing.keys import kind_of

    route = route_for(inbound(**kw), Policy(topic_scope="per_sender"), "my-bot_1")
    assert kind_of(route.key) == route.kind


def test_queue_per_route_kind() -> None:
    policy = Policy(queues={"p2p": "dm", "group": "grp", "topic": "top"})
    assert route_for(inbound(chat_type="p2p"), policy, "x").queue == "dm"
    assert route_for(inbound(), policy, "x").queue == "grp"
    assert route_for(inbound(thread_id="omt_1"), policy, "x").queue == "top"


def test_profile_namespaces_keys() -> None:
    assert route_for(inbound(), Policy(), "a").key != route_for(inbound(), Policy(), "b").key


AT_BOT = [Mention(key="@_user_1", open_id=BOT, name="bot")]
AT_OTHER = [Mention(key="@_user_1", open_id="ou_x", name="x")]


@pytest.mark.parametrize(("kw", "policy", "bot", "admitted", "reason"), [
    ({"chat_type": "p2p"}, Policy(), None, True, "admitted"),
    ({}, Policy(), BOT, False, "not mentioned"),
    ({"mentions": AT_BOT}, Policy(), BOT, True, "mentioned"),
    ({"mentions": AT_OTHER}, Policy(), BOT, False, "not mentioned"),
    ({"mentioned_all": True}, Policy(), BOT, False, "mention-all only"),
    ({"mentions": AT_BOT}, Policy(), None, False, IDENTITY_UNKNOWN),
    ({}, Policy(require_mention=False), None, True, "admitted"),
    ({}, Policy(overrides={"oc_g": ChatOverride(require_mention=False)}), BOT, True, "admitted"),
    ({"sender_open_id": BOT, "chat_type": "p2p"}, Policy(), BOT, False, "own message"),
    ({"sender_open_id": BOT, "sender_type": "app", "mentions": AT_BOT}, Policy(bot_messages="allow"), BOT, False,
     "own message"),
    ({"sender_type": "app", "chat_type": "p2p"}, Policy(), BOT, False, "bot message"),
    ({"sender_type": "bot", "mentions": AT_BOT}, Policy(), BOT, False, "bot message"),
    ({"sender_type": "bot", "mentions": AT_BOT}, Policy(bot_messages="allow"), BOT, True, "mentioned"),
    ({"sender_type": "app", "mentions": AT_BOT}, Policy(bot_messages="allow"), BOT, True, "mentioned"),
    ({"sender_type": "app", "chat_type": "p2p"}, Policy(bot_messages="allow"), BOT, True, "admitted"),
    ({"sender_type": "app", "mentions": AT_BOT}, Policy(bot_messages="allow", require_mention=False), None, False,
     IDENTITY_UNKNOWN),
    ({"sender_type": "app", "chat_type": "p2p"}, Policy(bot_messages="allow"), None, False, IDENTITY_UNKNOWN),
    ({**NO_OPEN_ID, "sender_type": "bot", "mentions": AT_BOT}, Policy(bot_messages="allow"), BOT, False,
     "bot sender without open_id"),
    ({"sender_type": "anonymous", "chat_type": "p2p"}, Policy(), BOT, False, "bot message"),
    ({"sender_open_id": "", "chat_type": "p2p"}, Policy(), BOT, False, NO_SENDER_ID),
    ({"sender_open_id": "", "mentions": AT_BOT}, Policy(), None, False, NO_SENDER_ID),
    ({**NO_OPEN_ID, "mentions": AT_BOT}, Policy(), BOT, True, "mentioned"),
    ({**NO_OPEN_ID, "chat_type": "p2p"}, Policy(deny_users=frozenset({"on_u1"})), BOT, False, "user not allowed"),
    ({**ONLY_USER_ID, "chat_type": "p2p"}, Policy(allow_users=frozenset({"e33ggbyz"})), BOT, True, "admitted"),
    ({"mentions": AT_BOT}, Policy(deny_chats=frozenset({"oc_g"})), BOT, False, "chat not allowed"),
    ({"mentions": AT_BOT}, Policy(allow_chats=frozenset({"oc_z"})), BOT, False, "chat not allowed"),
    ({"mentions": AT_BOT}, Policy(allow_chats=frozenset({"oc_g"})), BOT, True, "mentioned"),
    ({"chat_type": "p2p"}, Policy(deny_users=frozenset({"ou_a"})), BOT, False, "user not allowed"),
    ({"chat_type": "p2p"}, Policy(allow_users=frozenset({"ou_b"})), BOT, False, "user not allowed"),
])
def test_admission(kw: dict[str, object], policy: Policy, bot: str | None, admitted: bool, reason: str) -> None:
    decision = admit(inbound(**kw), policy, bot)
    assert (decision.admit, decision.reason) == (admitted, reason)


def test_content_key_survives_new_message_id() -> None:
    a = inbound(message_id="om_1", create_time="1700000000000")
    b = inbound(message_id="om_2", create_time="1700000000000")
    c = inbound(message_id="om_3", create_time="1700000000001")
    assert a.content_key() == b.content_key() != c.content_key()


def test_bot_mention_is_stripped_and_others_resolved() -> None:
    from bot.envelope import Envelope, MessageEvent, to_inbound
    from sandbox.feishu.events import mention, message_event

    payload = message_event(chat_id="oc_g", chat_type="group", text="@_user_1 请问 @_user_2 的问题",
                            mentions=[mention(BOT, "助手"), mention("ou_amy", "Amy", key="@_user_2")])
    envelope = Envelope.model_validate(payload)
    inbound = to_inbound(envelope, MessageEvent.model_validate(envelope.event), BOT)
    assert inbound.text == "请问 @Amy 的问题"
    assert [m.open_id for m in inbound.mentions] == [BOT, "ou_amy"]
