"""The key primitives every room builds its Redis keys on, and the keys of the ground: the inbox/lease protocol,
sessions, a batch's caches, dedupe markers, route indexes, queues, pools, dead letters, health and pacing. A feature's
keys are built by its own module over `prefix`/`tagged`/`feature` (timers/keys.py, bitable/keys.py,
memory/scopes/keys.py …), with the strings every release wrote, so existing data keeps working.

Per-route keys carry a `{tag}` hash tag so a route's keys sit together, but the service targets one
Redis primary (with replica/Sentinel), not Redis Cluster: RQ needs one primary, and the protocol's
scripts touch profile-wide keys (dedupe markers, `dirty`, `kicks`, dead letters) next to per-route ones.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache


@lru_cache(maxsize=8192)  # several keys of one route are built per event
def route_tag(route_key: str) -> str:
    return hashlib.sha1(route_key.encode("utf-8")).hexdigest()[:16]

@dataclass(frozen=True)
class Keys:
    profile: str

    @property
    def prefix(self) -> str:
        return f"fb:{self.profile}"

    def _route(self, kind: str, route_key: str) -> str:
        return f"{self.prefix}:{kind}:{{{route_tag(route_key)}}}"

    # -- the primitives every room builds its own keys on, in its own module (timers/keys.py, …) ---------

    def tagged(self, kind: str, route_key: str) -> str:
        """A per-route key of `kind`: `fb:<profile>:<kind>:{<route tag>}`, next to the route's own keys."""
        return self._route(kind, route_key)

    def feature(self, namespace: str, *parts: str) -> str:
        """A key of the feature `namespace` (its name in the App): `fb:<profile>:f:<namespace>:<part>:…`."""
        if not namespace.isidentifier() or any(":" in p for p in parts):
            raise ValueError(f"not a feature key: {namespace!r} {parts!r}")
        return ":".join((self.prefix, "f", namespace, *parts))

    def feature_of_route(self, namespace: str, route_key: str, *parts: str) -> str:
        """A feature's key of one route, next to the route's own keys (`{tag}`)."""
        return self.feature(namespace, f"{{{route_tag(route_key)}}}", *parts)

    # -- per route: the inbox/lease protocol ---------------------------------------------------------

    def inbox(self, rk: str) -> str:
        return self._route("inbox", rk)

    def proc(self, rk: str) -> str:
        return self._route("proc", rk)

    def lease(self, rk: str) -> str:
        return self._route("lease", rk)

    def fails(self, rk: str) -> str:
        """Hash of the batches now in `proc`: `f:<batch>` failures and `s:<batch>` starts."""
        return self._route("fails", rk)

    def transcript(self, rk: str) -> str:
        """The pre-session transcript (releases before sessions); read once to seed a route's first session."""
        return self._route("transcript", rk)

    # -- per route: sessions (memory/sessions.py) ------------------------------------------------------

    def route_state(self, rk: str) -> str:
        """HASH `sid` (current session id) and `gen` (generation: bumped by every user reset)."""
        return self._route("route", rk)

    def sessions(self, rk: str) -> str:
        """HASH session id → JSON record; `<sid>#<counter>` → token and turn counters."""
        return self._route("sess", rk)

    def session_log_prefix(self, rk: str) -> str:
        return f"{self._route('log', rk)}:"

    def session_log(self, rk: str, sid: str) -> str:
        """LIST of one session's transcript entries (JSON)."""
        return f"{self.session_log_prefix(rk)}{sid}"

    # -- per batch: caches a run writes, deleted when the batch commits (and expiring on their own) ------

    def answer(self, rk: str, batch_id: str) -> str:
        return f"{self._route('answer', rk)}:{batch_id}"

    def sent(self, rk: str, batch_id: str) -> str:
        return f"{self._route('sent', rk)}:{batch_id}"

    # -- per profile ---------------------------------------------------------------------------------

    # Dedupe markers are per profile, not per route: a redelivery must stay a duplicate after a
    # routing-policy change sends the same message to another route.
    def seen_message(self, message_id: str) -> str:
        return f"{self.prefix}:seen:m:{message_id}"

    def seen_content(self, content_key: str) -> str:
        return f"{self.prefix}:seen:c:{content_key}"

    @property
    def dirty(self) -> str:
        """ZSET route → time it last became dirty: every route with pending work or a held lease."""
        return f"{self.prefix}:dirty"

    @property
    def routes(self) -> str:
        """ZSET route → when a run last took its events: every route, newest first (the console's routes page)."""
        return f"{self.prefix}:routes"

    def routes_of(self, ident: str) -> str:
        """ZSET route → when a run last took its events, for one chat, person or topic id (`oc_…`, `ou_…`, `omt_…`)."""
        return f"{self.prefix}:routes_of:{ident}"

    def pool(self, host: str) -> str:
        """HASH of one host's worker pool (size, busy, waiting, min, max), 30 s TTL, refreshed by its supervisor."""
        return f"{self.prefix}:pool:{host}"

    @property
    def pools(self) -> str:
        """ZSET host → last refresh of its pool status: the live pools without a SCAN."""
        return f"{self.prefix}:pools"

    @property
    def kicks(self) -> str:
        """LIST of kick records the sweeper turns into RQ drain jobs."""
        return f"{self.prefix}:kicks"

    @property
    def delayed(self) -> str:
        """ZSET kick record → due time: retries after a backoff, dispatched by the sweeper."""
        return f"{self.prefix}:delayed"

    @property
    def running(self) -> str:
        """ZSET route → deadline of the batch its run is working on (the watchdog's view)."""
        return f"{self.prefix}:running"

    @property
    def runinfo(self) -> str:
        """HASH route → JSON {exec_id, job_id, started} of the run working on it."""
        return f"{self.prefix}:runinfo"

    @property
    def dead(self) -> str:
        """HASH dead-letter id → record."""
        return f"{self.prefix}:dead"

    @property
    def dead_order(self) -> str:
        """ZSET dead-letter id → time it was buried (listing order)."""
        return f"{self.prefix}:dead:order"

    def dead_replayed(self, dead_id: str) -> str:
        return f"{self.prefix}:dead:replayed:{dead_id}"

    def dead_discarded(self, dead_id: str) -> str:
        """A discarded dead letter's record, kept a week for a look (the console's Discard)."""
        return f"{self.prefix}:dead:discarded:{dead_id}"

    @property
    def paused(self) -> str:
        """HASH component (`model`, `feishu`) → JSON reason: work paused for an operator to fix."""
        return f"{self.prefix}:paused"

    @property
    def alerts(self) -> str:
        """LIST of admin alerts the sweeper posts to ADMIN_CHAT_ID."""
        return f"{self.prefix}:alerts"

    @property
    def metrics(self) -> str:
        """HASH of counters shared by every process (web, workers, sweeper)."""
        return f"{self.prefix}:metrics"

    @property
    def preflight(self) -> str:
        """STRING (JSON): the sweeper's summary of `python -m bot.doctor`'s checks, shown by /readyz."""
        return f"{self.prefix}:preflight"

    def capability_off(self, name: str) -> str:
        """STRING (JSON, expiring): an optional capability a missing scope turned off (feishu/capabilities.py)."""
        return f"{self.prefix}:capability_off:{name}"

    @property
    def health(self) -> str:
        """HASH of start-up checks (Redis persistence and eviction policy)."""
        return f"{self.prefix}:health"

    def pace(self, scope: str) -> str:
        """ZSET of recent Open API send times for one pacing scope (a chat, or the whole app)."""
        return f"{self.prefix}:pace:{scope}"

    @property
    def rejected(self) -> str:
        return f"{self.prefix}:rejected"

    @property
    def bot_open_id(self) -> str:
        return f"{self.prefix}:bot:open_id"

    @property
    def bot_name(self) -> str:
        """STRING the bot's app name (bot/v3/info), cached with its open_id."""
        return f"{self.prefix}:bot:name"

    def lark_cache(self, key: str) -> str:
        return f"{self.prefix}:lark:{key}"

    @property
    def clock_offset(self) -> str:
        """STRING seconds added to the wall clock (sandbox only: `python -m sandbox clock +2d`)."""
        return f"{self.prefix}:clock:offset"
