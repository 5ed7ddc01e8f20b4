"""The feature's Redis keys, all under `fb:<profile>:f:codehost:…` (Keys.feature): watches and their indexes, what
is known of each watched thread (its head, its CI), each topic's pending card, the deliveries log."""

from __future__ import annotations

from core.keys import Keys

NAME = "codehost"


def watch(k: Keys, wid: str) -> str:
    """HASH of one watch: item, provider, repo, kind, number, source, who, when."""
    return k.feature(NAME, "w", wid)


def item_watches(k: Keys, item_id: str) -> str:
    """ZSET watch id → when added: one item's watches (bounded per item)."""
    return k.feature(NAME, "item", item_id)


def thread_watchers(k: Keys, thread_key: str) -> str:
    """SET of the watch ids on one thread (links.Thread.key): how a delivery finds its items."""
    return k.feature(NAME, "t", thread_key)


def watches_all(k: Keys) -> str:
    """ZSET watch id → when it expires: every watch of the deployment (bounded), what the sweeper expires."""
    return k.feature(NAME, "watches")


def muted(k: Keys, item_id: str) -> str:
    """HASH thread key → until when: threads `/unwatch` took off an item (links seen again do not bring them back)."""
    return k.feature(NAME, "muted", item_id)


def head(k: Keys, thread_key: str) -> str:
    """STRING: a watched pull/merge request's current head commit."""
    return k.feature(NAME, "head", thread_key)


def by_sha(k: Keys, provider: str, repo_key: str, sha: str) -> str:
    """SET of `kind:number` of the watched pull/merge requests whose head is `sha` (a CI run finds them)."""
    return k.feature(NAME, "sha", provider, repo_key, sha[:64])


def ci(k: Keys, thread_key: str) -> str:
    """HASH check name → JSON {sha, state, by, sig}: the last CI outcome per check of one thread."""
    return k.feature(NAME, "ci", thread_key)


def topic(k: Keys, rk: str) -> str:
    """HASH of a topic route's card state: the pending flush timer and its due time, the last card's time."""
    return k.feature_of_route(NAME, rk, "topic")


def topic_buffer(k: Keys, rk: str) -> str:
    """ZSET happening JSON → time: what the topic's next card shows."""
    return k.feature_of_route(NAME, rk, "buffer")


def flushes(k: Keys) -> str:
    """ZSET topic route → due time of its pending card: the sweeper's net for a flush whose timer event was lost."""
    return k.feature(NAME, "flushes")


def deliveries(k: Keys) -> str:
    """LIST of recent deliveries (accepted, ignored, duplicate) with their outcome, newest first (bounded)."""
    return k.feature(NAME, "deliveries")


def refusals(k: Keys) -> str:
    """LIST of recent refused requests (bad signature or token, malformed), newest first; apart from `deliveries`
    so a flood of forgeries cannot push the real deliveries out of the console."""
    return k.feature(NAME, "refusals")
