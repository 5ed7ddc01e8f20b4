"""The operator console in a real browser (issue 26 acceptance 1-5): Debian's chromium, headless, driven by Selenium
through /usr/bin/chromedriver (no browser download, ever), against the real app, workers, sweeper and emulators.

Feishu sign-in goes through the emulator's authorize page; Replay and Cancel are clicked; hostile text is looked at
on every page that lists it while the test listens for a dialog.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from core.keys import Keys
from memory.scopes.paths import Scope
from memory.scopes.store import Caps, Memories
from sandbox.feishu.events import mention
from tests.harness import BOT_OPEN_ID, deliver, free_port, message_id, reply_text, unique, wait_for
from tests.harness import wait_route_idle as idle
from tests.own_stack import OwnStack
from tests.test_items import open_topic
from timers.keys import timers_due

TZ = ZoneInfo("Asia/Shanghai")
NOON = datetime(2026, 12, 1, 12, 0, tzinfo=TZ)
ADMIN, OTHER = "ou_browser_admin", "ou_browser_other"
HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>"
CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
INSTALL = "apt-get install chromium chromium-driver (Debian's packages; `make test` installs them when run as root)"


@pytest.fixture(scope="module")
def stack(env: dict[str, str], workdir: Path, feishu: Any) -> Iterator[OwnStack]:
    s = OwnStack.with_items(env, workdir, feishu, "brw", clock=NOON, CONSOLE_ADMINS=ADMIN, ADMIN_TOKEN="brw-admin",
                            CONSOLE_URL=f"http://127.0.0.1:{free_port()}", RUN_RETRY_DELAYS="1,1,1",
                            DEAD_LETTER_AFTER="2", TIMER_CHECK_SECONDS="0.2")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
        pytest.fail(f"the console's browser tests need {CHROMIUM} and {DRIVER}: {INSTALL}")
    profile = tempfile.mkdtemp(prefix="fb-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={profile}", "--window-size=1400,1000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)  # no Selenium Manager
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(autouse=True)
def _ready(feishu: Any, stack: OwnStack, claude: Any, r: redis.Redis) -> Iterator[None]:
    stack.ready_for_test(feishu)
    feishu.add_user(ADMIN, "值班运维")
    stack.set_clock(r, NOON)
    yield
    claude.clear_fail_when()


def no_dialog(driver: WebDriver) -> bool:
    try:
        alert = driver.switch_to.alert
    except NoAlertPresentException:
        return True
    alert.dismiss()
    return False


def left(old: WebElement) -> bool:
    """The page `old` belongs to is gone. Selenium's `staleness_of`, except that chromedriver, asked while the
    navigation swaps documents, may answer "Node with given id does not belong to the document" (an unknown
    error, not a stale element): that too means the old page is gone (seen in a fresh clone on a loaded machine)."""
    try:
        old.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as e:
        if "does not belong to the document" in str(e):
            return True
        raise
    return False


def navigate(driver: WebDriver, element: WebElement, timeout: float = 30) -> None:
    """Click what leaves the page (a link, a form's submit) and return once the next page has loaded. Selenium's
    click does not wait for the navigation it starts: looking at once finds the old page, or nothing while the new
    one loads, and a `get` right after it cancels it (a sign-in callback that never set its cookie) — all seen on a
    loaded machine."""
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, timeout).until(lambda _d: left(old))
    WebDriverWait(driver, timeout).until(lambda d: d.execute_script("return document.readyState") == "complete")


def sign_in(driver: WebDriver, stack: OwnStack, who: str) -> None:
    driver.delete_all_cookies()
    driver.get(f"{stack.web.url}/console/")  # no sign-in: the sign-in page
    assert "/console/login" in driver.current_url
    navigate(driver, driver.find_element(By.CSS_SELECTOR, '[data-action="feishu-sign-in"]'))  # → authorize page
    box = driver.find_element(By.ID, "open_id")
    box.clear()
    box.send_keys(who)
    navigate(driver, driver.find_element(By.ID, "allow"))  # → the console's callback → the page asked for


def click_in_row(driver: WebDriver, row_testid: str, attr: str, value: str, action: str) -> None:
    row = driver.find_element(By.CSS_SELECTOR, f'[data-testid="{row_testid}"][{attr}="{value}"]')
    navigate(driver, row.find_element(By.CSS_SELECTOR, f'[data-action="{action}"]'))


def test_feishu_sign_in_shows_the_overview_and_refuses_another_user(browser: WebDriver, stack: OwnStack,
                                                                    r: redis.Redis) -> None:
    wait_for(lambda: r.get(Keys(stack.profile).preflight), 30, what="the sweeper's preflight")
    sign_in(browser, stack, ADMIN)
    assert browser.find_element(By.CSS_SELECTOR, '[data-testid="overview"]')
    assert browser.find_element(By.CSS_SELECTOR, '[data-testid="status"]').text in ("ready", "degraded")
    rows = browser.find_elements(By.CSS_SELECTOR, '[data-testid="preflight-row"]')
    assert rows and any("reply in chats and topics" in row.text for row in rows), [r.text for r in rows]
    assert "值班运维" in browser.find_element(By.CSS_SELECTOR, '[data-testid="operator"]').text
    sign_in(browser, stack, OTHER)
    assert "/console/login" in browser.current_url or "callback" in browser.current_url
    assert OTHER in browser.find_element(By.CSS_SELECTOR, '[data-testid="login-error"]').text
    browser.get(f"{stack.web.url}/console/timers")
    assert "/console/login" in browser.current_url  # still nobody signed in


def test_a_dead_letter_replayed_in_the_browser_answers_once_and_a_second_replay_is_refused(
        browser: WebDriver, stack: OwnStack, feishu: Any, claude: Any, r: redis.Redis) -> None:
    marker = unique("POISON")
    claude.fail_when(marker)
    chat = unique("oc_brw_dead")
    mid = message_id(deliver(stack.web, feishu, chat_id=chat, chat_type="p2p", sender_open_id="ou_brw_dead",
                             text=f"{marker} 帮我看看这个报错"))
    rk = f"feishu:{stack.profile}:p2p:{chat}"
    [dead] = wait_for(lambda: stack.dead_letters(rk), 60, what="the dead letter")
    claude.clear_fail_when(marker)
    answers_before = len(feishu.replies_to(mid))  # the short notice that it failed
    sign_in(browser, stack, ADMIN)
    browser.get(f"{stack.web.url}/console/deadletters")
    row = browser.find_element(By.CSS_SELECTOR, f'[data-testid="deadletter-row"][data-dead-id="{dead["id"]}"]')
    assert "failed 2 times" in row.find_element(By.CSS_SELECTOR, '[data-testid="deadletter-error"]').text
    first = browser.current_window_handle
    browser.switch_to.new_window("tab")  # a second operator's tab, still showing the dead letter
    browser.get(f"{stack.web.url}/console/deadletters")
    stale = browser.current_window_handle
    browser.switch_to.window(first)
    click_in_row(browser, "deadletter-row", "data-dead-id", dead["id"], "replay")
    assert "已重放" in browser.find_element(By.CSS_SELECTOR, '[data-testid="said"]').text
    wait_for(lambda: len(feishu.replies_to(mid)) > answers_before, 60, what="the replayed answer")
    idle(r, Keys(stack.profile), rk)
    answers = feishu.replies_to(mid)[answers_before:]
    assert len(answers) == 1 and marker in reply_text(answers[0]), [reply_text(a) for a in answers]
    browser.switch_to.window(stale)
    click_in_row(browser, "deadletter-row", "data-dead-id", dead["id"], "replay")
    assert "已经处理过了" in browser.find_element(By.CSS_SELECTOR, '[data-testid="said"]').text
    idle(r, Keys(stack.profile), rk)
    assert len(feishu.replies_to(mid)) == answers_before + 1
    browser.close()
    browser.switch_to.window(first)
    browser.get(f"{stack.web.url}/console/audit")
    rows = [(row.find_element(By.CSS_SELECTOR, '[data-testid="audit-who"]').text,
             row.find_element(By.CSS_SELECTOR, '[data-testid="audit-what"]').text,
             row.find_element(By.CSS_SELECTOR, '[data-testid="audit-outcome"]').text)
            for row in browser.find_elements(By.CSS_SELECTOR, '[data-testid="audit-row"]')[:2]]
    assert rows == [(ADMIN, "replay", "already-replayed"), (ADMIN, "replay", "ok")], rows


def test_a_follow_up_cancelled_in_the_browser_never_fires(browser: WebDriver, stack: OwnStack, feishu: Any,
                                                          r: redis.Redis) -> None:
    chat = unique("oc_brw_timer")
    mid = message_id(deliver(stack.web, feishu, chat_id=chat, chat_type="p2p", sender_open_id="ou_brw_timer",
                             text="明天上午提醒我核对账单"))
    wait_for(lambda: feishu.replies_to(mid), 60, what="the confirmation")
    rk = f"feishu:{stack.profile}:p2p:{chat}"
    [timer] = stack.admin("GET", f"timers?route={rk}").json()["timers"] or [None]
    assert timer and timer["state"] == "pending"
    sign_in(browser, stack, ADMIN)
    browser.get(f"{stack.web.url}/console/timers")
    click_in_row(browser, "timer-row", "data-timer-id", timer["id"], "cancel")
    assert "已取消" in browser.find_element(By.CSS_SELECTOR, '[data-testid="said"]').text
    assert not browser.find_elements(By.CSS_SELECTOR, f'[data-timer-id="{timer["id"]}"]')
    sent = len(feishu.bot_messages(chat))
    stack.set_clock(r, datetime.fromtimestamp(timer["due"], TZ) + timedelta(minutes=5))
    # the scheduler looks every 0.2 s; a pending timer this late would have been pushed and answered by now
    wait_for(lambda: r.zscore(timers_due(Keys(stack.profile)), timer["id"]) is None, 10, what="no due entry")
    idle(r, Keys(stack.profile), rk, polls=8)
    assert len(feishu.bot_messages(chat)) == sent
    assert stack.admin("GET", f"timers/{timer['id']}").json()["state"] == "cancelled"


def test_the_routing_simulator_shows_the_key_the_service_used(browser: WebDriver, stack: OwnStack, feishu: Any,
                                                               r: redis.Redis) -> None:
    chat, thread = unique("oc_brw_route"), unique("omt_brw")
    mids = {}
    for sender, extra in (("ou_brw_a", {}), ("ou_brw_a", {"thread_id": thread})):
        env = deliver(stack.web, feishu, chat_id=chat, chat_type="group", sender_open_id=sender,
                      text="@_user_1 看看", mentions=[mention(BOT_OPEN_ID, "助手")], **extra)
        mids[bool(extra)] = message_id(env)
    for m in mids.values():
        wait_for(lambda m=m: feishu.replies_to(m), 60, what="the answers")
    keys = Keys(stack.profile)
    used_group = r.zrevrange(keys.routes_of("ou_brw_a"), 0, -1)
    used_topic = r.zrevrange(keys.routes_of(thread), 0, -1)
    sign_in(browser, stack, ADMIN)
    shown = {}
    for label, thread_id in (("group", ""), ("topic", thread)):
        browser.get(f"{stack.web.url}/console/routing")
        form = browser.find_element(By.CSS_SELECTOR, '[data-testid="routing-form"]')
        form.find_element(By.NAME, "chat_id").send_keys(chat)
        form.find_element(By.NAME, "sender").send_keys("ou_brw_a")
        form.find_element(By.NAME, "thread_id").send_keys(thread_id)
        navigate(browser, form.find_element(By.CSS_SELECTOR, '[data-action="simulate"]'))
        shown[label] = browser.find_element(By.CSS_SELECTOR, '[data-testid="route-key"]').text
    assert shown["topic"] == f"feishu:{stack.profile}:topic:{chat}:{thread}" and shown["topic"] in used_topic
    assert shown["group"] == f"feishu:{stack.profile}:group:{chat}:ou_brw_a" and shown["group"] in used_group


def test_hostile_text_is_text_on_every_page_that_lists_it_and_no_dialog_fires(
        browser: WebDriver, stack: OwnStack, feishu: Any, claude: Any, r: redis.Redis) -> None:
    keys = Keys(stack.profile)
    chat = unique("oc_brw_xss")
    mid = message_id(deliver(stack.web, feishu, chat_id=chat, chat_type="p2p", sender_open_id="ou_brw_xss",
                             text=f"明天上午提醒我{HOSTILE}"))
    wait_for(lambda: feishu.replies_to(mid), 60, what="the follow-up")
    marker = unique("XSSPOISON")
    claude.fail_when(marker)
    poison = unique("oc_brw_xss_dead")
    deliver(stack.web, feishu, chat_id=poison, chat_type="p2p", sender_open_id="ou_brw_xss", text=f"{marker} {HOSTILE}")
    wait_for(lambda: stack.dead_letters(f"feishu:{stack.profile}:p2p:{poison}"), 60, what="the dead letter")
    _, _, _, item = open_topic(stack.web, feishu, r, keys, text=f"@_user_1 {HOSTILE} 报表导出是空的")
    rk = f"feishu:{stack.profile}:p2p:{chat}"
    idle(r, keys, rk)
    scope = Scope("people", unique("ou_brw_xss"))
    Memories(r, keys, Caps(files=20, chars=100_000, file_chars=8000)).change(
        scope, scope.id, "seed", lambda _f: {"instructions.md": f"以后{HOSTILE}"})
    sign_in(browser, stack, ADMIN)
    pages = ["/console/timers", "/console/deadletters", "/console/items", f"/console/items/{item.item_id}",
             f"/console/routes/{rk}", f"/console/memory/{scope.name}", f"/console/routes?q={chat}", "/console/",
             "/console/memory"]
    for path in pages:
        browser.get(stack.web.url + path)
        assert no_dialog(browser), path
        body = browser.find_element(By.TAG_NAME, "body").text
        if path not in (f"/console/routes?q={chat}", "/console/", "/console/memory"):
            assert "<script>alert(1)</script>" in body, (path, body[:500])
        assert not browser.find_elements(By.CSS_SELECTOR, "main script, main img"), path
    assert browser.execute_script("return document.querySelectorAll('img[src=\"x\"]').length") == 0
    assert no_dialog(browser)
