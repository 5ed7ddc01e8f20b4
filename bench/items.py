"""Items (issue 7): Open API, Bitable and model requests per first answer, follow-up turn and cross-chat reference.

The whole real stack (chaos.stack: gunicorn, worker supervisor, sweeper, embedded Redis) with items on, against
the Feishu emulator (which records every request with its `op`) and the Claude stand-in. Each measured action
runs alone: request cursors are taken, the action is sent, its answer awaited, and the window closes only once
every route is idle (no route left in the `dirty` set for several polls), so a run's last write is counted
and nothing of the next action is. Counts, not timings: they are deterministic.

- first answer: an @bot report opening a new topic, until the item's analysis is "done";
- follow-up 1 / 2: the next two @bot messages in that topic (acceptance: Bitable reads per follow-up ≤ 2);
- baseline in the same run: the same two follow-ups in a topic that is not an item;
- reference from another chat by a member of the item's chat (record link, then item id: the membership
  listing is cached after the first); baseline: two plain turns in another chat.

Requests the action did not cause (tenant token fetches, the sweeper's bot_info, the table check's fields
and subscribe, which run at start and hourly) are reported apart, as "background", never in the totals.

    python -m bench.items              # 10 topics (~2 min)
    python -m bench.items --topics 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from bitable.index import Items
from chaos.stack import APP_ID, BOT_OPEN_ID, Stack
from sandbox.feishu.events import mention, message_event, signed_request

OUT = Path(__file__).resolve().parent / "results" / "items.json"
APP, TABLE = "bascnBenchItems01", "tblBenchItems01"
BACKGROUND = ("token", "bot_info", "drive_subscribe")  # never caused by a message (see module docstring)
READS = ("bitable_search", "bitable_batch_get", "bitable_fields")
READ_BOUND = 2  # acceptance: a follow-up costs at most two Bitable reads
REPORT = "@_user_1 报表导出 rpt-{n} 一直是空的\n从昨天 18:00 开始，三个客户都受影响。"
ORDER = ("reply", "create", "get", "list", "chat", "resource", "message_patch", "chat_members", "bitable_fields",
         "bitable_search", "bitable_batch_get", "bitable_create", "bitable_update")
SCENARIOS = (
    ("first_answer", "first answer (report → analysis done)"),
    ("follow_up_1", "item topic: follow-up 1"),
    ("follow_up_2", "item topic: follow-up 2"),
    ("plain_topic_1", "baseline: plain topic, follow-up 1"),
    ("plain_topic_2", "baseline: plain topic, follow-up 2"),
    ("reference_1", "other chat: reference 1 (member)"),
    ("reference_2", "other chat: reference 2 (cached)"),
    ("plain_group_1", "baseline: other chat, turn 1"),
    ("plain_group_2", "baseline: other chat, turn 2"),
)
DIFFS = (("follow_up_1", "plain_topic_1"), ("follow_up_2", "plain_topic_2"),
         ("reference_1", "plain_group_1"), ("reference_2", "plain_group_2"))


@dataclass
class Window:
    """The requests one action caused (ops), the model calls, and background requests seen meanwhile."""

    ops: Counter[str] = field(default_factory=Counter)
    background: Counter[str] = field(default_factory=Counter)
    model: int = 0
    count_tokens: int = 0

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def reads(self) -> int:
        return sum(self.ops[op] for op in READS)

    def as_dict(self) -> dict[str, Any]:
        return {"ops": dict(self.ops), "background": dict(self.background), "model": self.model,
                "count_tokens": self.count_tokens, "total": self.total, "bitable_reads": self.reads}


class Rig:
    """Sends events as Feishu would and measures one action at a time."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.items = Items(stack.r, stack.keys)

    def post(self, chat: str, text: str, sender: str, *, thread: str | None = None,
             root: str | None = None) -> str:
        """An @bot message: registered in the emulator, then POSTed signed and encrypted; its message id."""
        env = message_event(chat_id=chat, chat_type="group", text=text, sender_open_id=sender, thread_id=thread,
                            root_id=root, parent_id=root, mentions=[mention(BOT_OPEN_ID, "助手")],
                            token=self.stack.secrets.verification_token, app_id=APP_ID)
        m = env["event"]["message"]
        self.stack.feishu.add_message(m["message_id"], chat, sender_open_id=sender, thread_id=thread, root_id=root,
                                      parent_id=root, content=m["content"], mentions=m["mentions"])
        body, headers = signed_request(env, encrypt_key=self.stack.secrets.encrypt_key)
        resp = requests.post(f"{self.stack.url}/feishu/events", data=body, headers=headers, timeout=10)
        resp.raise_for_status()
        return str(m["message_id"])

    def measure(self, action: Callable[[], None]) -> Window:
        feishu, claude = self.stack.feishu, self.stack.claude
        f0, c0, t0 = len(feishu.requests), len(claude.requests), len(claude.count_requests)
        action()
        self.wait_idle()
        w = Window(model=len(claude.requests) - c0, count_tokens=len(claude.count_requests) - t0)
        for req in feishu.requests_since(f0):
            (w.background if req["op"] in BACKGROUND else w.ops)[req["op"]] += 1
        return w

    def wait_idle(self, timeout: float = 60.0, polls: int = 5) -> None:
        """Every route idle (none has work or a lease: the `dirty` set is empty), `polls` checks in a row."""
        deadline, streak = time.monotonic() + timeout, 0
        while streak < polls:
            streak = streak + 1 if self.stack.r.zcard(self.stack.keys.dirty) == 0 else 0
            if time.monotonic() > deadline:
                raise RuntimeError(f"routes not idle after {timeout:.0f} s")
            time.sleep(0.1)

    def answered(self, message_id: str, timeout: float = 60.0) -> None:
        _until(lambda: self.stack.feishu.replies_to(message_id), timeout, f"the reply to {message_id}")

    def analysed(self, thread: str, timeout: float = 90.0) -> str:
        item = _until(lambda: self.items.by_thread(thread), timeout, f"the item of {thread}")
        _until(lambda: (self.items.get(item.item_id) or item).analysis == "done", timeout, "the first answer")
        return str(item.item_id)


def _until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)
    return value


def ask(rig: Rig, chat: str, text: str, sender: str, thread: str | None = None,
        root: str | None = None) -> Callable[[], None]:
    return lambda: rig.answered(rig.post(chat, text, sender, thread=thread, root=root))


def one_topic(rig: Rig, n: int, tag: str, out: dict[str, list[Window]]) -> None:
    """An item topic (first answer, two follow-ups, two references from another chat) and its baselines."""
    chat, thread, reporter = f"oc_{tag}_i{n}", f"omt_{tag}_i{n}", f"ou_{tag}_reporter"
    roots: list[str] = []

    def open_topic() -> None:
        roots.append(rig.post(chat, REPORT.format(n=7000 + n), reporter, thread=thread))
        rig.analysed(thread)

    out["first_answer"].append(rig.measure(open_topic))
    item = rig.items.by_thread(thread)
    assert item is not None
    for k, text in ((1, "@_user_1 现在该怎么处理？"), (2, "@_user_1 还需要核实哪些日志？")):
        out[f"follow_up_{k}"].append(rig.measure(ask(rig, chat, text, f"ou_{tag}_dev", thread, roots[0])))
    # baseline topic: its root did not address the bot (so no item); the same two follow-ups
    plain_chat, plain_thread = f"oc_{tag}_p{n}", f"omt_{tag}_p{n}"
    plain_root = rig.stack.feishu.add_message(f"om_{tag}_p{n}", plain_chat, text="报表导出一直是空的",
                                              sender_open_id=reporter, thread_id=plain_thread)["message_id"]
    for k, text in ((1, "@_user_1 现在该怎么处理？"), (2, "@_user_1 还需要核实哪些日志？")):
        out[f"plain_topic_{k}"].append(rig.measure(ask(rig, plain_chat, text, f"ou_{tag}_dev", plain_thread,
                                                       plain_root)))
    # another chat: a member of the item's chat refers to it twice; baseline two plain turns elsewhere
    member = f"ou_{tag}_member{n}"
    rig.stack.feishu.set_members(chat, [reporter, member])
    link = f"https://x.feishu.cn/base/{APP}?table={TABLE}&record={item.record_id}"
    refs = (f"@_user_1 这个事项现在什么进展？{link}", f"@_user_1 {item.item_id} 谁在跟？")
    for k, text in enumerate(refs, 1):
        out[f"reference_{k}"].append(rig.measure(ask(rig, f"oc_{tag}_x{n}", text, member)))
    for k, text in enumerate(("@_user_1 这周发布安排是什么？", "@_user_1 谁在值班？"), 1):
        out[f"plain_group_{k}"].append(rig.measure(ask(rig, f"oc_{tag}_g{n}", text, member)))


def summarise(windows: list[Window]) -> dict[str, Any]:
    ops = sorted({op for w in windows for op in w.ops} | {op for w in windows for op in w.background})
    mean = {op: statistics.fmean(w.ops[op] for w in windows) for op in ops if any(w.ops[op] for w in windows)}
    background = {op: statistics.fmean(w.background[op] for w in windows) for op in ops
                  if any(w.background[op] for w in windows)}
    totals, reads = [w.total for w in windows], [w.reads for w in windows]
    return {"n": len(windows), "ops_mean": mean, "background_mean": background,
            "model_mean": statistics.fmean(w.model for w in windows),
            "count_tokens_mean": statistics.fmean(w.count_tokens for w in windows),
            "total_mean": statistics.fmean(totals), "total_min": min(totals), "total_max": max(totals),
            "bitable_reads_max": max(reads), "windows": [w.as_dict() for w in windows]}


def _num(x: float) -> str:
    return "–" if x == 0 else f"{x:.1f}".removesuffix(".0")


def table(s: dict[str, dict[str, Any]]) -> str:
    names = [name for name, _ in SCENARIOS]
    ops = [op for op in ORDER if any(op in s[n]["ops_mean"] for n in names)]
    ops += sorted({op for n in names for op in s[n]["ops_mean"]} - set(ops))
    lines = ["| request (mean per action) | " + " | ".join(label for _, label in SCENARIOS) + " |",
             "|---|" + "---|" * len(names)]
    for op in ops:
        lines.append(f"| `{op}` | " + " | ".join(_num(s[n]["ops_mean"].get(op, 0)) for n in names) + " |")
    lines.append("| **Open API total** | " + " | ".join(
        f"**{_num(s[n]['total_mean'])}**" + ("" if s[n]["total_min"] == s[n]["total_max"]
                                             else f" ({s[n]['total_min']}–{s[n]['total_max']})")
        for n in names) + " |")
    lines.append("| Bitable reads (max) | " + " | ".join(str(s[n]["bitable_reads_max"]) for n in names) + " |")
    lines.append("| model requests | " + " | ".join(_num(s[n]["model_mean"]) for n in names) + " |")
    lines.append("| count_tokens requests | " + " | ".join(_num(s[n]["count_tokens_mean"]) for n in names) + " |")
    lines.append("| background (not counted) | " + " | ".join(
        ", ".join(f"{op} {_num(v)}" for op, v in s[n]["background_mean"].items()) or "–" for n in names) + " |")
    lines += ["", "| items vs baseline | Open API + model requests | difference | ratio |", "|---|---|---|---|"]
    for a, b in DIFFS:
        x, y = s[a]["total_mean"] + s[a]["model_mean"], s[b]["total_mean"] + s[b]["model_mean"]
        lines.append(f"| {a} vs {b} | {_num(x)} vs {_num(y)} | +{_num(x - y)} | {x / y:.2f} |")
    return "\n".join(lines)


def check(s: dict[str, dict[str, Any]]) -> tuple[bool, str]:
    worst = max(s[n]["bitable_reads_max"] for n in ("follow_up_1", "follow_up_2"))
    ok = worst <= READ_BOUND
    return ok, (f"{'PASS' if ok else 'FAIL'}: a follow-up costs at most {READ_BOUND} Bitable reads "
                f"(search + batch_get + fields): worst follow-up {worst}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10, help="item topics (each with its baselines)")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args(argv)
    env = {"BITABLE_APP_TOKEN": APP, "BITABLE_TABLE_ID": TABLE, "ITEM_MEMBER_CACHE_SECONDS": "300"}
    stack = Stack(workers=args.workers, env=env)
    stack.feishu.add_table(APP, TABLE)  # before the sweeper's table check at start
    out: dict[str, list[Window]] = {name: [] for name, _ in SCENARIOS}
    stack.start()
    try:
        rig, tag = Rig(stack), uuid.uuid4().hex[:6]
        rig.wait_idle()
        for n in range(args.topics):
            one_topic(rig, n, tag, out)
            print(f"topic {n + 1}/{args.topics}: first answer {out['first_answer'][-1].total} requests, "
                  f"follow-up {out['follow_up_1'][-1].total}", flush=True)
    finally:
        stack.close()
    summary = {name: summarise(ws) for name, ws in out.items()}
    ok, verdict = check(summary)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"topics": args.topics, "read_bound": READ_BOUND, "read_bound_ok": ok,
                               "scenarios": summary}, indent=2, ensure_ascii=False))
    print(table(summary))
    print(verdict)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
