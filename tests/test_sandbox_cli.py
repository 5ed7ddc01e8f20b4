"""The sandbox CLI's item commands against the real stack: topic, reply-topic, click, records, edit-record.

`main([...])` runs in-process with the service's environment (a bot profile of its own with Bitable on, its
own worker and sweeper) and talks to the web app and the shared emulator over HTTP, as it would under `make run`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from bitable.index import Items
from core.keys import Keys
from sandbox.cli.commands import main
from tests.harness import Proc, WebServer, settings_from, stop_all, unique, wait_for, wait_route_idle, wait_serving

APP, TABLE = "bascnCliApp01", "tblCli01"
REPORT = "报表导出 rpt-9921 一直是空的\n从昨天 18:00 开始，三个客户都受影响。"


@pytest.fixture(scope="module")
def rig(env: dict[str, str], workdir: Path, r: redis.Redis) -> Iterator[tuple[WebServer, Keys, dict[str, str]]]:
    profile = unique("cli")
    own = {**env, "BOT_PROFILE": profile, "WORKER_CONCURRENCY": "3", "BITABLE_APP_TOKEN": APP,
           "BITABLE_TABLE_ID": TABLE}
    web, keys = WebServer(settings_from(own)), Keys(profile)
    procs = [Proc(["-m", "jobs.sweeper"], own, str(workdir), workdir / f"{profile}-sweeper.log"),
             Proc(["-m", "jobs.worker", "--name", profile], own, str(workdir), workdir / f"{profile}-worker.log")]
    wait_for(lambda: r.get(keys.bot_open_id), 60, what="the CLI rig's sweeper")
    wait_serving(r, procs, profile)
    yield web, keys, own
    web.stop()
    stop_all(procs)


@pytest.fixture
def cli(rig: tuple[WebServer, Keys, dict[str, str]], feishu: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Any:
    """Run `python -m sandbox …` in-process with the rig's environment; returns (exit code, stdout)."""
    web, _, own = rig
    feishu.add_table(APP, TABLE)
    for name, value in own.items():
        monkeypatch.setenv(name, value)

    def run(*args: str) -> tuple[int, str]:
        capsys.readouterr()
        local = args[0] in ("records", "clock", "memory")  # commands that do not post to the webhook
        code = main(list(args) if local else [*args, "--url", f"{web.url}/feishu/events"])
        return code, capsys.readouterr().out

    return run


def _approval_card(feishu: Any, chat: str) -> str:
    for m in reversed(feishu.bot_messages(chat)):
        if m["msg_type"] == "interactive" and "待审批" in json.dumps(feishu.card_versions(m["message_id"])[0],
                                                                   ensure_ascii=False):
            return str(m["message_id"])
    return ""


def test_topic_edit_record_and_approval_through_the_cli(rig, cli, feishu, r) -> None:
    _, keys, _ = rig
    chat = unique("oc_cli")
    code, out = cli("topic", REPORT, "--chat", chat, "--as", "ou_reporter", "--wait", "60")
    assert code == 0, out
    thread = re.search(r"topic (omt_\w+) in", out).group(1)  # type: ignore[union-attr]
    footers = re.findall(r"— (事项 \S+ · 第 \d 版 · \S+)", out)
    assert [f.split(" · ", 1)[1] for f in footers] == ["第 1 版 · 分析中", "第 2 版 · 摘要", "第 3 版 · 完整分析"], out
    item = Items(r, keys).by_thread(thread)
    assert item is not None and item.record_id and footers[0].startswith(f"事项 {item.item_id}")
    rk = f"feishu:{keys.profile}:topic:{chat}:{thread}"
    wait_route_idle(r, keys, rk)

    # Feishu pushes record events only for a subscribed base; the per-test emulator reset may have dropped
    # the sweeper's subscription, so make it again as the sweeper's table check does.
    feishu.store.subscribe(APP, "bitable")
    code, out = cli("edit-record", item.record_id, "标题=报表导出为空（3 个客户）", "负责人=ou_owner", "状态=处理中",
                    "--as", "ou_reporter")
    assert code == 0 and "HTTP 200 (drive.file.bitable_record_changed_v1 record_edited" in out, out
    fields = next(rec for rec in feishu.records(APP, TABLE) if rec["record_id"] == item.record_id)["fields"]
    assert "".join(s["text"] for s in fields["标题"]) == "报表导出为空（3 个客户）"
    assert [u["id"] for u in fields["负责人"]] == ["ou_owner"] and fields["状态"] == "处理中"

    code, out = cli("reply-topic", thread, "确认修好了，把状态改成已解决", "--as", "ou_dev")
    assert code == 0 and "待审批" in out and "批准 → approve" in out, out
    card = wait_for(lambda: _approval_card(feishu, chat), 30, what="the approval card")
    code, out = cli("click", card, "approve", "--as", "ou_reporter")
    assert code == 0 and "HTTP 200; toast: 已收到，正在处理" in out and "已批准" in out, out
    wait_route_idle(r, keys, rk)
    code, out = cli("records")
    assert code == 0 and f"{item.record_id}\n" in out and "状态: 已解决" in out and "负责人: ou_owner" in out, out


def test_a_followup_set_with_say_is_watched_firing_with_clock(rig, cli, r) -> None:
    """Issue 17: `python -m sandbox clock +1d` moves every process's clock and prints what the bot then posts."""
    chat = unique("oc_cli_fu")
    code, out = cli("clock", "2026-11-30T21:30", "--wait", "0")  # pinned: the test reads alike at any real hour
    assert code == 0 and "service time: 2026-11-30 21:30" in out, out
    code, out = cli("say", "--chat", chat, "明天上午提醒我看报表")
    assert code == 0 and "已设提醒" in out and "10:00" in out
    code, out = cli("clock", "+1d", "--wait", "20")
    assert code == 0 and "service time:" in out
    assert re.search(r"bot \[" + chat + r"\]: .*提醒：看报表", out), out
    code, out = cli("clock", "reset", "--wait", "0")
    assert code == 0 and "offset +0 s" in out


def test_memory_prints_what_a_person_asked_to_be_remembered(rig, cli) -> None:
    """Issue 25: `python -m sandbox memory people/<open_id>` prints the scope; a bad name gets a clear error."""
    user, chat = unique("ou_cli_mem"), unique("oc_cli_mem")
    code, out = cli("say", "以后回答我先给结论", "--chat", chat, "--user", user, "--wait", "30")
    assert code == 0 and "记忆已更新" in out, out
    code, out = cli("memory", f"people/{user}")
    assert code == 0 and "── instructions.md" in out and "先给结论" in out and f"({user}," in out, out
    code, out = cli("memory")
    assert code == 0 and f"people/{user}" in out
    code, out = cli("memory", "people/../chats")
    assert code == 2 and "people/<open_id>" in out
    code, out = cli("memory", f"people/{unique('ou_nobody')}")
    assert code == 0 and "nothing remembered" in out
