"""Pure parts of the console and its neighbours: which ROUTING_* rule decided, who may sign in, where a sign-in may
send the browser back to, the two log formats. Tables of cases; no fakes."""

from __future__ import annotations

import io
import json
import logging

import pytest

from console.signin import csrf_ok, may_sign_in, token_matches
from console.web import local
from core.inbound import Inbound, Mention
from core.logs import JsonFormatter, TextFormatter, chosen_format
from core.settings import ChatOverride, Settings
from routing import explain
from routing.keys import route_for
from routing.policy import Policy


def msg(chat_type: str = "group", chat: str = "oc_1", sender: str = "ou_a", thread: str | None = None) -> Inbound:
    return Inbound(event_id="e", message_id="m", chat_id=chat, chat_type=chat_type, sender_open_id=sender,
                   sender_type="user", message_type="text", text="", content="{}", thread_id=thread,
                   mentions=[Mention(key="@_user_1", open_id="ou_bot")])


SHARED = Policy(overrides={"oc_s": ChatOverride(group_scope="shared")})


@pytest.mark.parametrize(("policy", "inbound", "rule", "key"), [
    (Policy(), msg(), "ROUTING_GROUP_SCOPE=per_sender", "feishu:p:group:oc_1:ou_a"),
    (Policy(group_scope="shared"), msg(), "ROUTING_GROUP_SCOPE=shared", "feishu:p:group:oc_1"),
    (SHARED, msg(chat="oc_s"), "ROUTING_CHAT_OVERRIDES[oc_s].group_scope=shared", "feishu:p:group:oc_s"),
    (SHARED, msg(chat="oc_s", thread="omt_1"), "ROUTING_TOPIC_SCOPE=shared", "feishu:p:topic:oc_s:omt_1"),
    (Policy(topic_scope="per_sender"), msg(thread="omt_1"), "ROUTING_TOPIC_SCOPE=per_sender",
     "feishu:p:topic:oc_1:omt_1:ou_a"),
    (Policy(), msg(chat_type="p2p", thread="omt_1"), "private chat: one route per chat (fixed)", "feishu:p:p2p:oc_1"),
])
def test_the_scope_rule_names_the_setting_behind_the_key(policy: Policy, inbound: Inbound, rule: str,
                                                         key: str) -> None:
    assert explain.scope_rule(inbound, policy) == rule
    assert route_for(inbound, policy, "p").key == key


@pytest.mark.parametrize(("policy", "reason", "rule"), [
    (Policy(deny_chats=frozenset({"oc_1"})), "chat not allowed", "ROUTING_DENY_CHATS"),
    (Policy(allow_chats=frozenset({"oc_9"})), "chat not allowed", "ROUTING_ALLOW_CHATS"),
    (Policy(deny_users=frozenset({"ou_a"})), "user not allowed", "ROUTING_DENY_USERS"),
    (Policy(allow_users=frozenset({"ou_z"})), "user not allowed", "ROUTING_ALLOW_USERS"),
    (Policy(), "not mentioned", "ROUTING_REQUIRE_MENTION"),
    (Policy(overrides={"oc_1": ChatOverride(require_mention=True)}), "not mentioned",
     "ROUTING_CHAT_OVERRIDES[oc_1].require_mention"),
    (Policy(), "bot message", "ROUTING_BOT_MESSAGES"),
    (Policy(), "own message", "(fixed)"),
])
def test_the_admission_rule_names_the_setting_behind_the_verdict(policy: Policy, reason: str, rule: str) -> None:
    assert explain.admission_rule(reason, msg(), policy) == rule


def test_the_queue_rule_names_the_kinds_variable() -> None:
    policy = Policy(queues={"p2p": "fast", "group": "runs", "topic": "slow"})
    assert explain.queue_rule(msg(thread="omt_1"), policy) == "ROUTING_QUEUE_TOPIC=slow"
    assert explain.queue_rule(msg(chat_type="p2p"), policy) == "ROUTING_QUEUE_P2P=fast"


def settings(**kw: str) -> Settings:
    return Settings(_env_file=None, feishu_app_id="cli_x", feishu_app_secret="s",  # type: ignore[call-arg,arg-type]
                    feishu_verification_token="v", feishu_encrypt_key="k", anthropic_api_key="sk", **kw)


@pytest.mark.parametrize(("env", "who", "allowed"), [
    ({"console_admins": "ou_a,ou_b"}, "ou_b", True),
    ({"console_admins": "ou_a"}, "ou_b", False),
    ({"item_admins": "ou_b"}, "ou_b", True),  # falls back to ITEM_ADMINS
    ({"console_admins": "ou_a", "item_admins": "ou_b"}, "ou_b", False),  # CONSOLE_ADMINS wins when set
    ({}, "ou_sandbox_admin", False),  # outside sandbox nobody by default
    ({}, "", False),
])
def test_who_may_sign_in_with_feishu(env: dict[str, str], who: str, allowed: bool) -> None:
    assert may_sign_in(settings(**env), who) is allowed


def test_in_sandbox_mode_the_sandbox_operator_signs_in() -> None:
    sandbox = Settings(_env_file=None)  # type: ignore[call-arg]
    assert may_sign_in(sandbox, "ou_sandbox_admin") and not may_sign_in(sandbox, "ou_sandbox_user")


def test_the_admin_token_and_csrf_compare_exactly_and_never_match_when_unset() -> None:
    assert token_matches(settings(admin_token="t0k"), "t0k") and not token_matches(settings(admin_token="t0k"), "t0")
    assert not token_matches(settings(), "") and not token_matches(settings(), "anything")
    assert csrf_ok("abc", "abc") and not csrf_ok("abc", "abd") and not csrf_ok("", "") and not csrf_ok("abc", None)


@pytest.mark.parametrize(("target", "back"), [
    ("/console/timers?offset=50", "/console/timers?offset=50"),
    ("/console/?", "/console/"),
    ("https://evil.example/console/", "/console/"),
    ("//evil.example/console/", "/console/"),
    ("/admin/api/deadletters", "/console/"),
    ("", "/console/"),
    (None, "/console/"),
])
def test_after_sign_in_the_browser_goes_back_only_to_a_console_page(target: str | None, back: str) -> None:
    assert local(target) == back


def record(**extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("jobs.drain", logging.INFO, __file__, 1, "turn answered", None, None)
    for k, v in extra.items():
        setattr(rec, k, v)
    return rec


def test_text_lines_are_readable_and_carry_the_same_fields_as_json() -> None:
    rec = record(route_key="feishu:p:p2p:oc_1", duration_ms=812, secret_field="never")
    text = TextFormatter().format(rec)
    assert "INFO  jobs.drain  turn answered  route_key=feishu:p:p2p:oc_1 duration_ms=812" in text
    line = json.loads(JsonFormatter().format(rec))
    assert line["route_key"] == "feishu:p:p2p:oc_1" and line["duration_ms"] == 812
    assert "secret_field" not in text and "secret_field" not in line  # only the named fields, never extras


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_log_format_follows_the_setting_then_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOG_TERMINAL", raising=False)
    assert chosen_format("json", Tty()) == "json" and chosen_format("text", io.StringIO()) == "text"
    assert chosen_format(None, Tty()) == "text" and chosen_format(None, io.StringIO()) == "json"
    monkeypatch.setenv("LOG_TERMINAL", "1")  # make run on a terminal: honcho pipes, the person reads
    assert chosen_format(None, io.StringIO()) == "text" and chosen_format("json", io.StringIO()) == "json"


@pytest.mark.parametrize(("forwarded", "trusted", "client"), [
    ("", 0, "10.0.0.9"), ("203.0.113.7", 0, "10.0.0.9"),  # no trusted proxy: the socket's address, whatever is claimed
    ("203.0.113.7", 1, "203.0.113.7"), ("198.51.100.1, 203.0.113.7", 1, "203.0.113.7"),  # the proxy's entry
    ("198.51.100.1, 203.0.113.7", 2, "198.51.100.1"), ("203.0.113.7", 2, "10.0.0.9"),  # fewer hops than proxies
])
def test_wrong_tokens_are_counted_per_client_as_the_trusted_proxy_reports_it(forwarded: str, trusted: int,
                                                                            client: str) -> None:
    from console.lockout import client_of

    assert client_of("10.0.0.9", forwarded, trusted) == client


def test_a_wrong_token_counter_is_never_without_its_expiry(r) -> None:
    """The count and its expiry are one script (console/lockout.py): a crash can never keep a client locked out."""
    from console.lockout import COUNT, WINDOW_S

    key = "fb:test:console:tries:" + str(id(r))
    r.delete(key)
    assert [int(r.eval(COUNT, 1, key, WINDOW_S)) for _ in range(3)] == [1, 2, 3]
    assert 0 < r.ttl(key) <= WINDOW_S
    r.delete(key)
