"""The operator console over HTTP (issue 26): sign-in gates, CSRF, the Feishu OAuth flow against the emulator, the
routing simulator against delivered events, hostile text, the audit log — through the real app on a real socket,
with its own deployment (workers, sweeper). The browser walks the same pages in tests/test_console_browser.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

import pytest
import redis
import requests

from console import audit
from console import keys as console_keys
from core.keys import Keys
from sandbox.feishu.events import mention
from tests.harness import BOT_OPEN_ID, deliver, free_port, message_id, unique, wait_for
from tests.harness import wait_route_idle as idle
from tests.own_stack import OwnStack

TZ = ZoneInfo("Asia/Shanghai")
NOON = datetime(2026, 12, 1, 12, 0, tzinfo=TZ)
TOKEN = "console-admin-token"
ADMIN, OTHER = "ou_console_admin", "ou_console_stranger"
SHARED = "oc_console_shared"  # a group with one shared session (ROUTING_CHAT_OVERRIDES)
HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>"
PAGES = ("/console/", "/console/routes", "/console/routing", "/console/items", "/console/timers",
         "/console/deadletters", "/console/memory", "/console/audit", "/console/rq/")


@pytest.fixture(scope="module")
def stack(env: dict[str, str], workdir: Path, feishu: Any) -> Iterator[OwnStack]:
    s = OwnStack.with_items(env, workdir, feishu, "con", clock=NOON, ADMIN_TOKEN=TOKEN, CONSOLE_ADMINS=ADMIN,
                            CONSOLE_URL=f"http://127.0.0.1:{free_port()}",
                            ROUTING_CHAT_OVERRIDES=f'{{"{SHARED}":{{"group_scope":"shared"}}}}',
                            RUN_RETRY_DELAYS="1,1,1", DEAD_LETTER_AFTER="2")
    feishu.add_user(ADMIN, "值班运维")
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _ready(feishu: Any, stack: OwnStack, claude: Any) -> Iterator[None]:
    stack.ready_for_test(feishu)
    feishu.add_user(ADMIN, "值班运维")
    yield
    claude.clear_fail_when()


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html[:500]
    return found.group(1)


def token_session(stack: OwnStack) -> requests.Session:
    s = requests.Session()
    page = s.get(f"{stack.web.url}/console/login", timeout=10)
    resp = s.post(f"{stack.web.url}/console/login/token", data={"csrf": csrf_of(page.text), "token": TOKEN},
                  timeout=10)
    assert resp.status_code == 200 and 'data-testid="overview"' in resp.text, resp.text[:300]
    return s


def feishu_sign_in(stack: OwnStack, as_who: str) -> tuple[requests.Session, requests.Response]:
    """The whole OAuth flow as a browser walks it: console → the emulator's authorize page → its form → callback."""
    s = requests.Session()
    page = s.get(f"{stack.web.url}/console/login/feishu", timeout=10)  # follows to the authorize page
    assert page.status_code == 200 and "授权" in page.text
    assert urlsplit(page.url).path == "/open-apis/authen/v1/authorize"
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page.text))
    resp = s.post(page.url.split("?")[0], data={**fields, "open_id": as_who, "decision": "allow"}, timeout=10)
    return s, resp


def test_without_a_sign_in_every_page_redirects_to_it_and_every_action_is_403(stack: OwnStack) -> None:
    for path in PAGES:
        resp = requests.get(stack.web.url + path, allow_redirects=False, timeout=10)
        assert resp.status_code == 302 and "/console/login" in resp.headers["Location"], (path, resp.status_code)
    actions = ("/console/timers/t_x/cancel", "/console/deadletters/d_x/replay", "/console/deadletters/d_x/discard",
               "/console/memory/people/ou_x/delete", "/console/memory/people/ou_x/undo", "/console/logout",
               "/console/rq/job/j_x/delete", "/console/rq/requeue/runs")
    for path in actions:
        resp = requests.post(stack.web.url + path, data={"csrf": "x"}, allow_redirects=False, timeout=10)
        assert resp.status_code == 403, (path, resp.status_code)
    forged = requests.get(stack.web.url + "/console/", cookies={"fb_console": "not-signed"}, allow_redirects=False,
                          timeout=10)
    assert forged.status_code == 302


def test_feishu_sign_in_lets_a_console_admin_in_and_refuses_anyone_else(stack: OwnStack, r: redis.Redis) -> None:
    s, landed = feishu_sign_in(stack, ADMIN)
    assert landed.status_code == 200 and 'data-testid="overview"' in landed.text and "值班运维" in landed.text
    cookie = next(c for c in s.cookies if c.name == "fb_console")
    assert cookie.has_nonstandard_attr("HttpOnly") and cookie.path == "/console/"
    _, refused = feishu_sign_in(stack, OTHER)
    assert refused.status_code == 403 and OTHER in refused.text and "CONSOLE_ADMINS" in refused.text
    assert "fb_console" not in refused.cookies
    entries, _ = audit.page(r, Keys(stack.profile))
    outcomes = [(e.who, e.what, e.outcome.split(":")[0]) for e in entries[:2]]
    assert outcomes == [(OTHER, "sign-in", "refused"), (ADMIN, "sign-in", "ok")], outcomes


def test_a_sign_in_code_is_single_use_and_a_callback_from_another_browser_is_refused(stack: OwnStack,
                                                                                     feishu: Any) -> None:
    s = requests.Session()
    page = s.get(f"{stack.web.url}/console/login/feishu", timeout=10)
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page.text))
    back = s.post(page.url.split("?")[0], data={**fields, "open_id": ADMIN, "decision": "allow"},
                  allow_redirects=False, timeout=10)
    callback = back.headers["Location"]
    assert "code=" in callback and f"state={fields['state']}" in callback
    stranger = requests.get(callback, allow_redirects=False, timeout=10)  # no pre-sign-in cookie: not its flow
    assert stranger.status_code == 403 and "fb_console" not in stranger.cookies
    # the state was used up by that attempt: the right browser must start again; the code itself is spent too
    assert s.get(callback, allow_redirects=False, timeout=10).status_code == 403
    code = parse_qs(urlsplit(callback).query)["code"][0]
    again = feishu.oauth.exchange({"grant_type": "authorization_code", "client_id": feishu.app_id,
                                   "client_secret": feishu.oauth.app_secret, "code": code,
                                   "redirect_uri": fields["redirect_uri"]})
    assert again[0]["code"] in (0, 20065)  # unused by the console (it refused before exchanging); once only
    assert feishu.oauth.exchange({"grant_type": "authorization_code", "client_id": feishu.app_id,
                                  "client_secret": feishu.oauth.app_secret, "code": code,
                                  "redirect_uri": fields["redirect_uri"]})[0]["code"] == 20065


def test_a_refused_authorization_signs_nobody_in(stack: OwnStack) -> None:
    s = requests.Session()
    page = s.get(f"{stack.web.url}/console/login/feishu", timeout=10)
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page.text))
    resp = s.post(page.url.split("?")[0], data={**fields, "open_id": ADMIN, "decision": "deny"}, timeout=10)
    assert resp.status_code == 403 and "拒绝" in resp.text and "fb_console" not in s.cookies


def test_token_sign_in_needs_the_login_forms_csrf_and_the_right_token(stack: OwnStack) -> None:
    s = requests.Session()
    page = s.get(f"{stack.web.url}/console/login", timeout=10)
    no_csrf = s.post(f"{stack.web.url}/console/login/token", data={"token": TOKEN}, timeout=10)
    assert no_csrf.status_code == 403 and "fb_console" not in s.cookies
    wrong = s.post(f"{stack.web.url}/console/login/token", data={"csrf": csrf_of(page.text), "token": "nope"},
                   timeout=10)
    assert wrong.status_code == 403 and "fb_console" not in s.cookies
    signed = token_session(stack)
    cookie = signed.cookies.get("fb_console")
    out = signed.post(f"{stack.web.url}/console/logout", data={"csrf": csrf_of(signed.get(
        f"{stack.web.url}/console/", timeout=10).text)}, allow_redirects=False, timeout=10)
    assert out.status_code == 302
    assert signed.get(f"{stack.web.url}/console/", allow_redirects=False, timeout=10).status_code == 302
    replayed = requests.get(f"{stack.web.url}/console/", cookies={"fb_console": cookie}, allow_redirects=False,
                            timeout=10)  # the old cookie, kept by someone: the sign-in itself is gone
    assert replayed.status_code == 302


def test_a_post_without_its_csrf_token_is_403_and_changes_nothing(stack: OwnStack, feishu: Any, claude: Any,
                                                                  r: redis.Redis) -> None:
    s = token_session(stack)
    chat = unique("oc_con_csrf")
    mid = message_id(deliver(stack.web, feishu, chat_id=chat, chat_type="p2p", sender_open_id="ou_con_csrf",
                             text="明天上午提醒我核对账单"))
    wait_for(lambda: feishu.replies_to(mid), 60, what="the follow-up's confirmation")
    rk = f"feishu:{stack.profile}:p2p:{chat}"
    [t] = stack.admin("GET", f"timers?route={rk}").json()["timers"]
    for data in ({}, {"csrf": "forged"}):
        resp = s.post(f"{stack.web.url}/console/timers/{t['id']}/cancel", data=data, allow_redirects=False,
                      timeout=10)
        assert resp.status_code == 403
    assert stack.admin("GET", f"timers/{t['id']}").json()["state"] == "pending"
    listing = s.get(f"{stack.web.url}/console/timers", timeout=10).text
    ok = s.post(f"{stack.web.url}/console/timers/{t['id']}/cancel", data={"csrf": csrf_of(listing)}, timeout=10)
    assert ok.status_code == 200 and "已取消" in ok.text
    assert stack.admin("GET", f"timers/{t['id']}").json()["state"] == "cancelled"


def test_a_dead_letter_discarded_once_is_never_answered_and_cannot_be_replayed(stack: OwnStack, feishu: Any,
                                                                               claude: Any, r: redis.Redis) -> None:
    marker = unique("DISCARDME")
    claude.fail_when(marker)
    chat = unique("oc_con_discard")
    mid = message_id(deliver(stack.web, feishu, chat_id=chat, chat_type="p2p", sender_open_id="ou_con_discard",
                             text=f"{marker} 这条会失败"))
    rk = f"feishu:{stack.profile}:p2p:{chat}"
    [dead] = wait_for(lambda: stack.dead_letters(rk), 60, what="the dead letter")
    assert dead["attempts"] == 2
    claude.clear_fail_when(marker)
    notices = len(feishu.replies_to(mid))
    s = token_session(stack)
    page = s.get(f"{stack.web.url}/console/deadletters", timeout=10).text
    assert dead["id"] in page and "failed 2 times" in page
    first = s.post(f"{stack.web.url}/console/deadletters/{dead['id']}/discard", data={"csrf": csrf_of(page)},
                   timeout=10)
    assert "已丢弃" in first.text and dead["id"] not in first.text.split('data-testid="deadletters"')[1]
    again = s.post(f"{stack.web.url}/console/deadletters/{dead['id']}/discard", data={"csrf": csrf_of(page)},
                   timeout=10)
    assert "已经处理过了" in again.text
    replay = s.post(f"{stack.web.url}/console/deadletters/{dead['id']}/replay", data={"csrf": csrf_of(page)},
                    timeout=10)
    assert "已经处理过了" in replay.text
    assert stack.admin("POST", f"deadletters/{dead['id']}/replay").status_code == 409
    idle(r, Keys(stack.profile), rk)
    assert len(feishu.replies_to(mid)) == notices  # nothing answered after the discard
    assert r.get(Keys(stack.profile).dead_discarded(dead["id"]))  # kept a week for a look


def test_the_routing_simulator_names_the_key_the_service_used(stack: OwnStack, feishu: Any, r: redis.Redis) -> None:
    s = token_session(stack)
    keys = Keys(stack.profile)
    at_bot = [mention(BOT_OPEN_ID, "助手")]
    delivered = {}
    for sender, thread in (("ou_sim_a", ""), ("ou_sim_b", ""), ("ou_sim_a", unique("omt_sim"))):
        extra = {"thread_id": thread} if thread else {}
        env = deliver(stack.web, feishu, chat_id=SHARED, chat_type="group", sender_open_id=sender,
                      text="@_user_1 看看这个", mentions=at_bot, **extra)
        mid = message_id(env)
        wait_for(lambda m=mid: feishu.replies_to(m), 60, what="the answer")
        used = [rk for rk in r.zrevrange(keys.routes_of(thread or sender), 0, -1)]
        delivered[(sender, thread)] = used[0]
    for (sender, thread), used in delivered.items():
        page = s.get(f"{stack.web.url}/console/routing", params={"chat_id": SHARED, "chat_type": "group",
                                                                 "sender": sender, "thread_id": thread,
                                                                 "mention": "1"}, timeout=10).text
        shown = re.search(r'data-testid="route-key">([^<]+)<', page).group(1)
        assert shown == used, (sender, thread, shown, used)
    assert delivered[("ou_sim_a", "")] == delivered[("ou_sim_b", "")] == f"feishu:{stack.profile}:group:{SHARED}"
    assert "ROUTING_CHAT_OVERRIDES[oc_console_shared].group_scope=shared" in s.get(
        f"{stack.web.url}/console/routing", params={"chat_id": SHARED, "chat_type": "group", "sender": "ou_sim_a"},
        timeout=10).text
    other = s.get(f"{stack.web.url}/console/routing", params={"chat_id": "oc_elsewhere", "chat_type": "group",
                                                              "sender": "ou_sim_a", "mention": "1"}, timeout=10).text
    assert f"feishu:{stack.profile}:group:oc_elsewhere:ou_sim_a" in other and "ROUTING_GROUP_SCOPE=per_sender" in other
    unaddressed = s.get(f"{stack.web.url}/console/routing", params={"chat_id": "oc_elsewhere", "chat_type": "group",
                                                                    "sender": "ou_sim_a"}, timeout=10).text
    assert "not mentioned" in unaddressed and "ROUTING_REQUIRE_MENTION" in unaddressed


def test_hostile_text_is_shown_as_text_under_a_policy_without_inline_script(stack: OwnStack, feishu: Any,
                                                                            r: redis.Redis) -> None:
    s = token_session(stack)
    chat = unique("oc_con_xss")
    mid = message_id(deliver(stack.web, feishu, chat_id=chat, chat_type="p2p", sender_open_id="ou_con_xss",
                             text=f"{HOSTILE} 明天上午提醒我{HOSTILE}"))
    wait_for(lambda: feishu.replies_to(mid), 60, what="the answer")
    rk = f"feishu:{stack.profile}:p2p:{chat}"
    idle(r, Keys(stack.profile), rk)
    for path in (f"/console/routes/{rk}", "/console/timers", f"/console/routes?q={chat}"):
        resp = s.get(stack.web.url + path, timeout=10)
        assert resp.status_code == 200
        csp = resp.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "<script>alert(1)" not in resp.text and "<img src=x" not in resp.text, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in s.get(f"{stack.web.url}/console/routes/{rk}", timeout=10).text


def test_every_action_is_in_the_audit_log_with_who_did_it(stack: OwnStack, r: redis.Redis) -> None:
    s = token_session(stack)
    page = s.get(f"{stack.web.url}/console/deadletters", timeout=10).text
    s.post(f"{stack.web.url}/console/deadletters/nothing-here/replay", data={"csrf": csrf_of(page)}, timeout=10)
    entries, _ = audit.page(r, Keys(stack.profile))
    assert (entries[0].who, entries[0].how, entries[0].what, entries[0].target, entries[0].outcome) == (
        "admin-token", "token", "replay", "nothing-here", "unknown")
    shown = s.get(f"{stack.web.url}/console/audit", timeout=10).text
    assert "nothing-here" in shown and "admin-token" in shown


def test_the_audit_log_pages_newest_first_and_stays_bounded(r: redis.Redis) -> None:
    keys = Keys(unique("audit"))
    for n in range(120):
        audit.write(r, keys, audit.Done(f"ou_{n}", "token", "cancel", f"t_{n}", "ok"), at=1000.0 + n)
    first, more = audit.page(r, keys, count=50)
    second, more2 = audit.page(r, keys, more or "", count=50)
    third, end = audit.page(r, keys, more2 or "", count=50)
    seen = [e.who for e in first + second + third]
    assert seen == [f"ou_{n}" for n in range(119, -1, -1)] and end is None
    # below KEEP; the cap is approximate trimming (MAXLEN ~)
    assert r.xinfo_stream(console_keys.audit(keys))["length"] == 120


def test_rq_dashboard_is_behind_the_sign_in_and_reads_the_json_jobs(stack: OwnStack) -> None:
    s = token_session(stack)
    page = s.get(f"{stack.web.url}/console/rq/", timeout=10)
    assert page.status_code == 200 and "RQ" in page.text
    assert "unsafe-inline" in page.headers["Content-Security-Policy"]  # its own pages only
    queues = s.get(f"{stack.web.url}/console/rq/0/data/queues.json", timeout=10)
    assert queues.status_code == 200 and any(q["name"].startswith(stack.profile) for q in queues.json()["queues"])
    assert s.get(f"{stack.web.url}/console/rq/0/data/workers.json", timeout=10).status_code == 200
    cross = s.post(f"{stack.web.url}/console/rq/queue/{stack.profile}-runs/failed/empty",
                   headers={"Origin": "https://evil.example"}, timeout=10)
    assert cross.status_code == 403
    assert s.get(f"{stack.web.url}/console/rq/requeue/{stack.profile}-runs", timeout=10).status_code == 403


def test_every_page_renders_for_a_signed_in_operator(stack: OwnStack) -> None:
    s = token_session(stack)
    for path in PAGES:
        resp = s.get(stack.web.url + path, timeout=10)
        assert resp.status_code == 200, (path, resp.status_code, resp.text[:300])
