"""A stored delivery's run, on its repository's internal route (`hook`): what happened, to which watched threads, for
which items — each watching item's topic gets it as an event of its own route (EVENT_TYPE), deduped per (delivery,
happening, item), so a rerun after a crash tells nobody twice.

Routing a delivery: the threads it names (a pull request, an issue, a run or pipeline), and for a CI run also the
watched pull/merge requests whose known head is its commit (threads.py); a CI outcome counts for a pull request only
on its current head, and only when it is news (failed where it did not fail yet, passed after failing). A head that
moved is noted for the watched pull requests and told to nobody. One repository's deliveries run in order on one
route, so what is known of a thread is never written by two runs at once.
"""

from __future__ import annotations

import json
import logging
import time

from codehost import deliveries
from codehost.deliveries import ACCEPTED
from codehost.events import CI, HEAD, Happening
from codehost.ingress import DEDUPE_TTL_S, Stored
from codehost.links import MR, PR, Thread
from codehost.threads import Threads
from codehost.watches import Watch, Watches
from core.inbound import Inbound, dumps
from runs.inbox import Pushed
from runs.outbox import LeaseLost
from runs.runtime import Runtime
from turn.registry import Context

log = logging.getLogger(__name__)
EVENT_TYPE = "codehost_event"  # an inbox entry of an item's topic route: one happening for that item


def watches_of(rt: Runtime) -> Watches:
    return rt.own("codehost.watches", lambda r: Watches(r.state, r.keys))


def threads_of(rt: Runtime) -> Threads:
    return rt.own("codehost.threads", lambda r: Threads(r.state, r.keys))


def topic_route(profile: str, chat_id: str, thread_id: str) -> str:
    """An item's topic, as one shared route whatever the topic scope (quiet triage's too)."""
    return f"feishu:{profile}:topic:{chat_id}:{thread_id}"


def fan_out(c: Context) -> str:
    """One delivery of the route `c.rk`; returns what it came to (also the deliveries log's outcome)."""
    stored = Stored.of(c.message)
    ctx = {"provider": stored.provider, "event": stored.event, "delivery": stored.delivery}
    try:
        happenings = stored.happenings()
    except ValueError:
        deliveries.note(c.rt.state, c.rt.keys, ACCEPTED, "unreadable body", **ctx)
        return "unreadable"
    outcomes = [_one(c, stored.delivery, n, h) for n, h in enumerate(happenings)] or ["nothing to act on"]
    outcome = "; ".join(outcomes)
    deliveries.note(c.rt.state, c.rt.keys, ACCEPTED, outcome, repo=happenings[0].repo if happenings else "", **ctx)
    log.info("webhook delivery fanned out", extra={"route_key": c.rk, "reason": outcome[:200]})
    return outcome


def _one(c: Context, delivery: str, n: int, h: Happening) -> str:
    rt, now = c.rt, c.rt.clock.now()
    if h.kind == HEAD:
        moved = [t.shown for t in h.thread_list() if watches_of(rt).on(t.aliases(), now)
                 and threads_of(rt).learn_head(t, h.sha)]
        return f"{h.kind}: head of {', '.join(moved)} noted" if moved else f"{h.kind}: nobody watches it"
    found, why = _watchers(rt, h, delivery, now)
    if not found:
        return f"{h.kind}: {why}"
    if not c.fence():
        raise LeaseLost(c.rk)
    told = [item_id for item_id, threads in found.items() if _push(c, delivery, n, h, item_id, threads)]
    return f"{h.kind}{' ' + h.state if h.state else ''}: {len(told)} item(s) told" + (f" ({why})" if why else "")


def _watchers(rt: Runtime, h: Happening, delivery: str, now: float) -> tuple[dict[str, list[Thread]], str]:
    """item id → the threads it watches that this happening concerns (and why nobody, when empty)."""
    threads = h.thread_list()
    if h.kind == CI:
        return _ci_watchers(rt, h, delivery, now)
    found: dict[str, list[Thread]] = {}
    for t in threads:
        for w in watches_of(rt).on(t.aliases(), now):
            found.setdefault(w.item_id, []).append(t)
    return found, "" if found else f"nobody watches {', '.join(t.shown for t in threads) or 'it'}"


def _ci_watchers(rt: Runtime, h: Happening, delivery: str, now: float) -> tuple[dict[str, list[Thread]], str]:
    known, store = threads_of(rt), watches_of(rt)
    for number, sha in h.heads:  # GitHub says these pull requests' head is this commit
        pr = Thread(h.provider, h.repo, PR, number)
        if store.on(pr.aliases(), now):
            known.learn_head(pr, sha)
    named = list(dict.fromkeys([*h.threads, *known.at(h.provider, h.repo, h.sha)]))
    found: dict[str, list[Thread]] = {}
    skipped: list[str] = []
    for kind, number in named:
        t = Thread(h.provider, h.repo, kind, number)
        watching: list[Watch] = store.on(t.aliases(), now)
        if not watching:
            continue
        head = known.head_of(t) if kind in (PR, MR) else ""
        if head and h.sha and head != h.sha:
            skipped.append(f"{t.shown}: not its head")
            continue
        if not known.judge(t, h.name, h.sha, h.state, delivery):
            skipped.append(f"{t.shown}: no news ({h.state} already known)")
            continue
        for w in watching:
            found.setdefault(w.item_id, []).append(t)
    if not found and not skipped:
        skipped.append(f"nobody watches {', '.join(Thread(h.provider, h.repo, k, n).shown for k, n in named)}"
                       if named else f"no watched pull request has head {h.sha[:12]}")
    return found, "; ".join(skipped)


def _push(c: Context, delivery: str, n: int, h: Happening, item_id: str, threads: list[Thread]) -> bool:
    """The happening as an event of the item's topic route; False when the item has no topic to tell."""
    rt = c.rt
    item = rt.items.get(item_id)
    if item is None or not item.chat_id or not item.thread_id:
        return False
    rk = topic_route(rt.settings.bot_profile, item.chat_id, item.thread_id)
    dedupe = f"ch:{delivery}:{n}:{item_id}"
    content = {"item_id": item_id, "delivery": delivery, "happening": h.to_json(),
               "threads": [[t.kind, t.number] for t in threads]}
    entry = Inbound(event_id=dedupe, message_id=dedupe, chat_id=item.chat_id, chat_type="group", sender_type="app",
                    message_type=EVENT_TYPE, text="", content=json.dumps(content, ensure_ascii=False),
                    create_time=str(int(time.time() * 1000)), thread_id=item.thread_id, root_id=item.root_id or None)
    rt.inbox.push(rk, dumps(entry), message_id=dedupe, content_key=dedupe, queue=rt.queue_of(rk),
                  also=Pushed(dedupe_ttl_s=DEDUPE_TTL_S))
    return True
