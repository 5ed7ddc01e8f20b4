"""Memory that outlives sessions (issue 25): loaded memory's tokens per request, Redis bytes per person, and what one
consolidation costs the model.

Embedded Redis and the Claude stand-in in this process; the service's own code on them (a real `Runtime`), no
web or workers.

1. Tokens per request. One group chat whose 10, 100 or 1,000 people each keep instructions (10 lines,
   people/<id>/instructions.md), the chat's own instructions.md and notes, and a topic's item with its
   progress.md. 200 requests, each a topic batch from 1–3 of those people (70 % / 20 % / 10 %, seeded): the memory
   block `memory/scopes/part.py` builds for it (`MemoriesPart.block`: the batch's grant, the load order, the budget) and
   its tokens as the turn counts them (`Budget.cost`), against the room MEMORY_BUDGET_SHARE × CONTEXT_BUDGET_TOKENS.
   Baseline: 10 people. Then one batch from 1, 3, … 30 of them at once: what the room bounds, and what it does not.
2. Redis bytes per person with 10 instruction lines written as 10 changes (one line each, as the memory tool's
   inserts, through `Memories.change`): `used_memory` delta ÷ people at 1,000, and MEMORY USAGE of a person's keys
   (files, version and counts, undo stack) plus their share of the profile's changed/scopes sets.
3. One consolidation per scope: `memories/dream.run` against the stand-in (its deterministic consolidation: owner
   facts merged, repeated notes deleted), for a person's scope (instructions.md, 10 lines: the baseline), a chat's
   with 5 and 20 files, and one at its caps (20 files, MEMORY_MAX_CHARS): requests, input and output tokens as the
   service reads them (the stand-in's usage, ~4 characters a token) and as it estimates them (`Budget.request_cost`,
   ~1 token per CJK character); and the 20 files again with the most of the day's conversations a consolidation is
   shown (5 routes × 6 entries × 300 characters).

Reports ratios against the baselines measured in the same run; no timing is asserted. Exit 1 if a sampled request's
memory went past the room or the 1,000-people p99 is more than 1.2 × the 10-people one (a batch from many people
going past it is reported, not asserted: a known defect, see bench/README.md).

    python -m bench.memory              # ~1-2 min
    python -m bench.memory --requests 50
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import redis
from pydantic import SecretStr

from claude.budget import Budget
from claude.client import Claude, Step
from claude.prompt import estimate_tokens
from core.inbound import Inbound
from core.settings import Settings
from memory.scopes import dream
from memory.scopes import keys as scope_keys
from memory.scopes.part import MemoriesPart, store_of
from memory.scopes.paths import Scope
from memory.scopes.settings import memory_settings
from memory.scopes.store import File, Memories
from memory.sessions import entry
from runs.runtime import Runtime
from sandbox.claude.standin import ClaudeStandin
from state.embedded import ensure_server, stop_server
from turn import rotation
from turn.registry import Context

OUT = Path(__file__).resolve().parent / "results" / "memory.json"
POPULATIONS = (10, 100, 1000)
LINES = 10  # instruction lines per person
BATCH_SENDERS = ((1, 0.7), (2, 0.2), (3, 0.1))
WIDE_BATCHES = (1, 3, 5, 8, 10, 30)  # senders in one batch (a busy topic)
WHOSE = re.compile(r"\n<whose [^>]*>.*?</whose>")
CHAT, THREAD, OWNER = "oc_bench_mem", "omt_bench_mem", "ou_bench_owner"
HABITS = ("回答先给结论", "用英文回答", "附上工单号", "别用表格", "代码用 Python 写", "说明影响范围", "列出下一步",
          "引用原始日志", "周报按模块分", "提到人时写全名", "数字保留两位小数", "先问清复现步骤")


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(q * len(ordered) + 0.999999) - 1))]


def used(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


def runtime(url: str, profile: str, model_url: str) -> Runtime:
    settings = Settings(_env_file=None, bot_profile=profile, redis_url=url,  # type: ignore[call-arg]
                        anthropic_base_url=model_url, anthropic_api_key=SecretStr("sk-bench"))
    return Runtime(settings, url)


def person(i: int) -> str:
    return f"ou_bench_p{i:05d}"


def instruction(rng: random.Random, n: int) -> str:
    return f"- 以后{rng.choice(HABITS)}（第 {n + 1} 条，{'补充说明' * rng.randint(0, 3)}）"


Edit = Callable[[Mapping[str, File]], Mapping[str, str | None]]


def put(path: str, text: str) -> Edit:
    return lambda _files: {path: text}


def append(path: str, line: str) -> Edit:
    """A line added at the end of `path` (created when missing), as the memory tool's insert does."""
    return lambda files: {path: files[path].text + "\n" + line if path in files else line}


def add_people(store: Memories, start: int, stop: int, seed: int = 7) -> None:
    """People `start`..`stop`-1, each writing LINES instruction lines one change at a time."""
    for i in range(start, stop):
        rng = random.Random(seed * 100_000 + i)
        for n in range(LINES):
            store.change(Scope("people", person(i)), person(i), "instructions.md edited",
                         append("instructions.md", instruction(rng, n)))


def add_team(store: Memories, item_id: str) -> None:
    """The chat's instructions and notes, the item's progress: the same for every population."""
    team, item = Scope("chats", CHAT), Scope("items", item_id)
    rules = "\n".join(f"- 团队约定：第 {n} 条，发版前在群里报备，评审至少两人" for n in range(10))
    store.change(team, OWNER, "seed", put("instructions.md", rules))
    for n in range(10):
        store.change(team, OWNER, "seed", put(f"notes/n{n:02d}.md", f"第 {n} 号服务的值班表在 wiki 第 {n} 页"))
    progress = "\n".join(f"- 已确认：第 {n} 个现象只在月底复现（12-0{n % 9 + 1}）" for n in range(10))
    store.change(item, OWNER, "seed", put("progress.md", progress))


def turn_of(rt: Runtime, senders: list[str], n: int) -> Context:
    """A topic turn whose batch holds one message from each sender."""
    batch = tuple(Inbound(event_id=f"ev_{n}_{i}", message_id=f"om_{n}_{i}", chat_id=CHAT, chat_type="group",
                          sender_open_id=s, sender_type="user", message_type="text", text="这个问题现在什么状态",
                          content="{}", thread_id=THREAD, root_id="om_root") for i, s in enumerate(senders))
    rk = f"feishu:{rt.settings.bot_profile}:topic:{CHAT}:{THREAD}"
    return Context(rt, rk, batch, f"b{n}", lambda: True, session_id="s_bench")


def senders_of(rng: random.Random, people: int) -> list[str]:
    k = rng.choices([k for k, _ in BATCH_SENDERS], [w for _, w in BATCH_SENDERS])[0]
    return [person(i) for i in rng.sample(range(people), k)]


def loaded(rt: Runtime, item_id: str, senders: list[str], n: int) -> tuple[int, float]:
    """(tokens, ms) of the memory block memory/scopes/part.py builds for one batch."""
    started = time.perf_counter()
    turn = turn_of(rt, senders, n)
    block = MemoriesPart(turn, item_id).block()
    ms = (time.perf_counter() - started) * 1000
    return turn.budget.cost(block), ms


def per_request(rt: Runtime, item_id: str, people: int, requests: int) -> dict[str, Any]:
    rng = random.Random(people)
    rows = [loaded(rt, item_id, senders_of(rng, people), n) for n in range(requests)]
    tokens, ms = [float(t) for t, _ in rows], [m for _, m in rows]
    room = room_of(rt)
    return {"people": people, "requests": requests, "median_tokens": statistics.median(tokens),
            "p99_tokens": pct(tokens, 0.99), "max_tokens": max(tokens), "room": room,
            "p99_share_of_room": round(pct(tokens, 0.99) / room, 3), "over_room": sum(1 for t in tokens if t > room),
            "median_ms": round(statistics.median(ms), 3), "p99_ms": round(pct(ms, 0.99), 3)}


def room_of(rt: Runtime) -> int:
    """MEMORY_BUDGET_SHARE of CONTEXT_BUDGET_TOKENS, as memory/scopes/part.py computes it."""
    return int(rotation.budget_of(rt).total * memory_settings(rt.settings).memory_budget_share)


def wide(rt: Runtime, item_id: str) -> list[dict[str, Any]]:
    """One batch from more and more people at once: what the room bounds, and what it does not (the lines saying
    whose memory each scope is)."""
    out = []
    for k in WIDE_BATCHES:
        turn = turn_of(rt, [person(i) for i in range(k)], -k)
        block = MemoriesPart(turn, item_id).block()
        whose = "".join(WHOSE.findall(block))
        out.append({"senders": k, "tokens": turn.budget.cost(block), "whose_tokens": turn.budget.cost(whose),
                    "files_loaded": block.count("<file "), "room": room_of(rt)})
    return out


def bytes_per_person(r: redis.Redis, rt: Runtime, people: int, delta: int) -> dict[str, Any]:
    """MEMORY USAGE (every element sampled) of what one person's memory owns, averaged over a sample."""
    k = rt.keys
    sample = [Scope("people", person(i)) for i in range(0, people, max(1, people // 200))]
    pipe = r.pipeline(transaction=False)
    for s in sample:
        for key in (scope_keys.memory_files(k, s.name), scope_keys.memory_meta(k, s.name),
                    scope_keys.memory_undo(k, s.name)):
            pipe.memory_usage(key, samples=0)
    got = [int(x or 0) for x in pipe.execute()]
    files, meta, undo = (sum(got[i::3]) / len(sample) for i in range(3))
    shared = sum(int(r.memory_usage(key, samples=0) or 0)
                 for key in (scope_keys.memory_changed(k), scope_keys.memory_scopes(k)))
    share = shared / (people + 2)  # the chat's and the item's scopes are in them too
    text = statistics.mean(len(store_of(rt).files(s)["instructions.md"].text.encode()) for s in sample)
    return {"people": people, "used_memory_delta_bytes": delta, "bytes_per_person_used_memory": round(delta / people),
            "files": round(files), "meta": round(meta), "undo": round(undo), "sets_share": round(share),
            "keys_total": round(files + meta + undo + share), "text_bytes": round(text),
            "undo_depth": int(r.llen(scope_keys.memory_undo(k, sample[0].name)))}


# -- 3: consolidation ---------------------------------------------------------------------------------------------

class Counted:
    """The runtime's model client, keeping every step's usage (what the service reads from the API)."""

    def __init__(self, llm: Claude) -> None:
        self.llm, self.steps = llm, list[Step]()

    def step(self, *args: Any, **kw: Any) -> Step:
        got = self.llm.step(*args, **kw)
        self.steps.append(got)
        return got


def owner_pair(n: int) -> dict[str, str]:
    return {f"notes/owner{n}a.md": f"报表{n}负责人是张三（12-0{n + 1} 记，ou_a）",
            f"notes/owner{n}b.md": f"报表{n}改由李四负责（12-0{n + 2} 记，ou_b）"}


def repeated(n: int) -> dict[str, str]:
    said = f"第 {n} 号环境的账号找运维申请"
    return {f"notes/dup{n}a.md": f"{said}（12-01 记，ou_a）", f"notes/dup{n}b.md": f"{said}（12-03 记，ou_b）"}


def plain(n: int) -> dict[str, str]:
    return {f"notes/plain{n:02d}.md": f"第 {n} 条：值班表在 wiki，周会改到周四，不要在周五发版"}


Dream = tuple[str, Scope, dict[str, str], bool]  # label, scope, files, with the day's conversations


def scopes_to_dream(rng: random.Random, caps: int) -> list[Dream]:
    """A person's instructions (the baseline); a chat's 5 and 20 files; 20 files at the chat's caps; 20 files with
    the most of the day's conversations a consolidation is shown."""
    person_lines = "\n".join(instruction(rng, n) for n in range(LINES))
    rules = "\n".join(f"- 团队约定：第 {n} 条，发版前在群里报备" for n in range(10))
    five = {"instructions.md": rules, **owner_pair(0), **plain(0), **plain(1)}
    twenty = {"instructions.md": rules}
    for n in range(4):
        twenty |= owner_pair(n)
    for n in range(3):
        twenty |= repeated(n)
    for n in range(5):
        twenty |= plain(n)
    each = caps // 20
    full = {"instructions.md": rules, **{p: t + "。" + "补" * (each - len(t) - 1) for p, t in twenty.items()
                                          if p != "instructions.md"}}
    talk = (f"a chat: 20 files + the day's conversations ({dream.ROUTES_SHOWN} routes × {dream.ENTRIES_SHOWN} "
            f"entries × {dream.ENTRY_CHARS} chars)")
    return [("a person: instructions.md, 10 lines (baseline)", Scope("people", "ou_bench_dreamer"),
             {"instructions.md": person_lines}, False),
            ("a chat: 5 files", Scope("chats", "oc_bench_dream5"), five, False),
            ("a chat: 20 files", Scope("chats", "oc_bench_dream20"), twenty, False),
            ("a chat at its caps: 20 files", Scope("chats", "oc_bench_dreamfull"), full, False),
            (talk, Scope("chats", "oc_bench_dreamtalk"), twenty, True)]


def recent(rt: Runtime, scope: Scope) -> None:
    """The most of the day's conversations a consolidation shows: ROUTES_SHOWN routes that loaded the scope, their
    last ENTRIES_SHOWN entries, each at least ENTRY_CHARS long (it shows their tails)."""
    r, k = rt.state, rt.keys
    for i in range(dream.ROUTES_SHOWN):
        rk, sid = f"feishu:{rt.settings.bot_profile}:group:oc_{scope.id[-8:]}:{person(i)}", f"s_{scope.id}_{i}"
        r.hset(k.route_state(rk), mapping={"sid": sid, "gen": 0})
        said = [entry("user" if n % 2 == 0 else "assistant", f"<message>第 {n} 轮：{'导出为空，日志里看到超时。' * 30}"
                      "</message>", batch_id=str(n)) for n in range(dream.ENTRIES_SHOWN)]
        r.rpush(k.session_log(rk, sid), *said)
        r.zadd(scope_keys.memory_routes(k, scope.name), {rk: rt.clock.now()})


def consolidate(rt: Runtime, standin: ClaudeStandin, label: str, scope: Scope, files: Mapping[str, str],
                talk: bool) -> dict[str, Any]:
    """One consolidation of `scope` holding `files`, through memory/scopes/dream.py `run` and the stand-in."""
    store = store_of(rt)
    for path, text in files.items():
        store.change(scope, "ou_bench", "seed", put(path, text))
    if talk:
        recent(rt, scope)
    llm = Counted(rt.llm)
    rt.__dict__["llm"] = llm  # the Runtime's cached model client, counted
    cursor = len(standin.requests)
    message = Inbound(event_id=f"dream:{scope.name}", message_id=f"dream:{scope.name}", chat_id="", chat_type="group",
                      sender_type="timer", message_type=dream.DREAM_TYPE, text="",
                      content=json.dumps({"scope": scope.name, "slot": 0}))
    before = store.files(scope)
    note = dream.run(Context(rt, f"feishu:{rt.settings.bot_profile}:memory:{scope.kind}:{scope.id}", (message,),
                             "b_dream", lambda: True))
    rt.__dict__["llm"] = llm.llm
    bodies = [c["body"] for c in standin.requests_since(cursor)]
    b = Budget(rt.settings.context_budget_tokens, rt.settings.max_output_tokens)
    estimated = [b.request_cost(x["system"], x["messages"], x.get("tools") or []) for x in bodies]
    after = store.files(scope)
    return {"scope": label, "files": len(files), "chars": sum(len(t) for t in files.values()),
            "requests": len(bodies), "input_tokens": sum(s.input_tokens for s in llm.steps),
            "output_tokens": sum(s.output_tokens for s in llm.steps),
            "estimated_input_tokens": sum(estimated), "largest_request_estimated": max(estimated, default=0),
            "estimated_output_tokens": sum(estimate_tokens(json.dumps(s.content, ensure_ascii=False))
                                           for s in llm.steps),
            "max_output_tokens": rt.settings.max_output_tokens,
            "files_after": len(after), "changed": sorted(p for p in set(before) | set(after)
                                                         if _text(before, p) != _text(after, p)), "note": note}


def _text(files: Mapping[str, File], path: str) -> str | None:
    return files[path].text if path in files else None


# -- the run ----------------------------------------------------------------------------------------------------

def run(requests: int) -> dict[str, Any]:
    var = tempfile.mkdtemp(prefix="bmem-")
    url = ensure_server(var)
    standin = ClaudeStandin().start()
    try:
        r = redis.Redis.from_url(url, decode_responses=True)
        rt = runtime(url, f"bmem{os.urandom(2).hex()}", standin.url)
        store = store_of(rt)
        item, _ = rt.items.claim(thread_id=THREAD, chat_id=CHAT, root_id="om_root", reporter=OWNER, origin="bench")
        r.set(scope_keys.chat_owner(rt.keys, CHAT), OWNER)  # the owner lookup, as memory/scopes/part.py caches it
        add_team(store, item.item_id)
        loads, have, delta = [], 0, 0
        for people in POPULATIONS:
            before = used(r)
            add_people(store, have, people)
            delta += used(r) - before
            have = people
            loads.append(per_request(rt, item.item_id, people, requests))
            print(json.dumps(loads[-1]), flush=True)
        batches = wide(rt, item.item_id)
        print(json.dumps(batches), flush=True)
        per_person = bytes_per_person(r, rt, have, delta)
        print(json.dumps(per_person), flush=True)
        cap = memory_settings(rt.settings).caps.chars
        dreams = [consolidate(rt, standin, *d) for d in scopes_to_dream(random.Random(7), cap)]
        for d in dreams:
            print(json.dumps(d, ensure_ascii=False), flush=True)
    finally:
        standin.stop()
        stop_server(var)
        shutil.rmtree(var, ignore_errors=True)
    return {"per_request": loads, "one_batch": batches, "per_person": per_person, "consolidation": dreams,
            "budget": {"context_budget_tokens": rt.settings.context_budget_tokens,
                       "memory_budget_share": memory_settings(rt.settings).memory_budget_share}}


def report(out: dict[str, Any]) -> str:
    loads, base = out["per_request"], out["per_request"][0]
    lines = ["| people in the chat | requests | memory tokens median | p99 | max | room | p99 ÷ room "
             "| median ÷ 10 people | p99 ÷ 10 people | block median ms |", "|---|---|---|---|---|---|---|---|---|---|"]
    for x in loads:
        lines.append(f"| {x['people']:,} | {x['requests']} | {x['median_tokens']:.0f} | {x['p99_tokens']:.0f} | "
                     f"{x['max_tokens']:.0f} | {x['room']} | {x['p99_share_of_room']:.2f} | "
                     f"{x['median_tokens'] / base['median_tokens']:.2f} | {x['p99_tokens'] / base['p99_tokens']:.2f} | "
                     f"{x['median_ms']:.2f} |")
    lines += ["", "| senders in one batch | memory tokens | of which 'whose' lines | files loaded whole | room | "
              "over the room |", "|---|---|---|---|---|---|"]
    for w in out["one_batch"]:
        over = w["tokens"] - w["room"]
        lines.append(f"| {w['senders']} | {w['tokens']:,} | {w['whose_tokens']:,} | {w['files_loaded']} | "
                     f"{w['room']:,} | {f'**+{over:,}**' if over > 0 else '–'} |")
    p = out["per_person"]
    lines.append(f"\nRedis per person with {LINES} instruction lines ({p['text_bytes']} B of text): used_memory "
                 f"{p['bytes_per_person_used_memory']:,} B ({p['used_memory_delta_bytes'] / 1e6:.2f} MB for "
                 f"{p['people']:,}); keys {p['keys_total']:,} B = files {p['files']:,} + version/counts {p['meta']} + "
                 f"undo ({p['undo_depth']} deep) {p['undo']:,} + share of the changed/scopes sets {p['sets_share']}")
    dreams, first = out["consolidation"], out["consolidation"][0]
    lines += ["", "| scope | files | chars | requests | input tokens (stand-in) | output (stand-in) | input (estimate) "
              "| largest request (estimate) | output (estimate) | input ÷ baseline | files changed |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in dreams:
        lines.append(f"| {d['scope']} | {d['files']} | {d['chars']:,} | {d['requests']} | {d['input_tokens']:,} | "
                     f"{d['output_tokens']:,} | {d['estimated_input_tokens']:,} | {d['largest_request_estimated']:,} | "
                     f"{d['estimated_output_tokens']:,} | "
                     f"{d['estimated_input_tokens'] / first['estimated_input_tokens']:.1f} | {len(d['changed'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="requests sampled per population")
    args = parser.parse_args(argv)
    started = time.monotonic()
    out = run(args.requests)
    out["seconds"] = round(time.monotonic() - started, 1)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=2, ensure_ascii=False))
    print(report(out))
    print(f"\nfull report: {OUT} ({out['seconds']} s)")
    loads = out["per_request"]
    within = all(x["over_room"] == 0 for x in loads)  # one_batch's excess is reported, a known defect
    flat = loads[-1]["p99_tokens"] <= 1.2 * loads[0]["p99_tokens"]
    return 0 if within and flat else 1


if __name__ == "__main__":
    raise SystemExit(main())
