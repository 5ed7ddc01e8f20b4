"""Every Redis key we write, built in one place.

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

    # -- the primitive a feature builds its own keys on (its module, its namespace) ----------------------

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
    def audit(self) -> str:
        """STREAM of operator actions (memory/audit.py), capped."""
        return f"{self.prefix}:audit"

    def console_session(self, sid: str) -> str:
        """HASH of one console sign-in (console/signin.py); expires with it."""
        return f"{self.prefix}:console:session:{sid}"

    def console_oauth(self, state: str) -> str:
        """A Feishu sign-in under way: its `state`, single use, ten minutes."""
        return f"{self.prefix}:console:oauth:{state}"

    def console_tries(self, address: str) -> str:
        """Wrong ADMIN_TOKENs (console form and admin API) from one client, expiring ten minutes after the first."""
        return f"{self.prefix}:console:tries:{address}"

    @property
    def console_secret(self) -> str:
        """The key that signs console cookies, made once per deployment."""
        return f"{self.prefix}:console:secret"

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
        """STRING (JSON): the sweeper's summary of `python -m jobs.doctor`'s checks, shown by /readyz."""
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

    def notes(self, scope: str) -> str:
        """HASH note id → JSON: shared notes of one memory scope (memory/notes.py)."""
        return f"{self.prefix}:notes:{scope}"

    def related(self, chat_id: str) -> str:
        """ZSET of a normal group's recent messages that did not address the bot (memory/related.py)."""
        return f"{self.prefix}:related:{chat_id}"

    # -- items (bitable/index.py): one item's keys share its tag; the lookups are profile-wide hashes ----

    def item(self, item_id: str) -> str:
        """HASH of one item: record_id, chat_id, thread_id, root_id, reporter, origin, answer_message_id, …"""
        return f"{self.prefix}:item:{{{item_id}}}"

    def item_guard(self, item_id: str) -> str:
        """STRING lock while one run decides the item's record (find, create, link): one item, one record."""
        return f"{self.prefix}:item:{{{item_id}}}:guard"

    def item_versions(self, item_id: str) -> str:
        """LIST of the item's first-answer versions (JSON), oldest first."""
        return f"{self.prefix}:item:{{{item_id}}}:versions"

    def item_sessions(self, item_id: str) -> str:
        """ZSET session id → when a turn of it first worked on the item."""
        return f"{self.prefix}:item:{{{item_id}}}:sessions"

    def item_routes(self, item_id: str) -> str:
        """ZSET route key → when it last worked on the item."""
        return f"{self.prefix}:item:{{{item_id}}}:routes"

    def item_runs(self, item_id: str) -> str:
        """LIST of the item's analysis runs (JSON)."""
        return f"{self.prefix}:item:{{{item_id}}}:runs"

    @property
    def items_by_thread(self) -> str:
        return f"{self.prefix}:items:by_thread"

    @property
    def items_by_record(self) -> str:
        return f"{self.prefix}:items:by_record"

    @property
    def items_by_route(self) -> str:
        """HASH route key → the item its latest turn worked on (topic routes are found by their thread)."""
        return f"{self.prefix}:items:by_route"

    @property
    def items_order(self) -> str:
        """ZSET item id → creation time."""
        return f"{self.prefix}:items:order"

    def proposal(self, proposal_id: str) -> str:
        """HASH of one proposed record change awaiting approval (items/approvals.py)."""
        return f"{self.prefix}:proposal:{proposal_id}"

    # -- materials (documents/) ---------------------------------------------------------------------------

    def doc_content(self, kind: str, token: str, revision: int, part: str = "") -> str:
        """STRING (JSON, expiring): a document's rendered text at one revision (sheets: per range)."""
        tail = f":{hashlib.sha1(part.encode()).hexdigest()[:12]}" if part else ""
        return f"{self.prefix}:doc:{kind}:{token}:r{revision}{tail}"

    def wiki_node(self, token: str) -> str:
        """STRING (JSON, expiring): what a wiki node points at (obj_token, obj_type, title)."""
        return f"{self.prefix}:wiki_node:{token}"

    def doc_file_size(self, token: str, modified: str) -> str:
        """STRING (expiring): a drive file's size in bytes at one modification time (a download asked it once)."""
        return f"{self.prefix}:doc_size:{token}:{modified}"

    def doc_acl(self, kind: str, token: str) -> str:
        """STRING (JSON, expiring): who may view a document (link share, collaborators, owner), cached briefly."""
        return f"{self.prefix}:doc_acl:{kind}:{token}"

    def docs_seen(self, rk: str) -> str:
        """HASH document → the revision this route last used (an update since is said to the model)."""
        return self._route("docs_seen", rk)

    def chat_members(self, chat_id: str) -> str:
        """SET of a chat's member open_ids, cached briefly for cross-chat item references."""
        return f"{self.prefix}:members:{chat_id}"

    @property
    def bitable_status(self) -> str:
        """HASH of the Bitable start-up check (schema, subscription), read by /readyz."""
        return f"{self.prefix}:bitable:status"

    def withdrawn(self, chat_id: str) -> str:
        """HASH message id → JSON {recalled | edited text}: recalled and edited messages of a chat."""
        return f"{self.prefix}:withdrawn:{chat_id}"

    def withdrawn_order(self, chat_id: str) -> str:
        """ZSET message id → time noted: which notes of the chat are oldest (the chat keeps the newest)."""
        return f"{self.prefix}:withdrawn:{chat_id}:order"

    @property
    def rejected(self) -> str:
        return f"{self.prefix}:rejected"

    @property
    def bot_open_id(self) -> str:
        return f"{self.prefix}:bot:open_id"

    def lark_cache(self, key: str) -> str:
        return f"{self.prefix}:lark:{key}"

    # -- timers (timers/): follow-ups, digests, triage wake-ups ---------------------------------

    @property
    def clock_offset(self) -> str:
        """STRING seconds added to the wall clock (sandbox only: `python -m sandbox clock +2d`)."""
        return f"{self.prefix}:clock:offset"

    def timer(self, timer_id: str) -> str:
        """HASH of one timer: kind, route, item, what, due, creator, state (memory/timers.py)."""
        return f"{self.prefix}:timer:{timer_id}"

    @property
    def timers_due(self) -> str:
        """ZSET pending timer id → due time: what the scheduler looks at."""
        return f"{self.prefix}:timers:due"

    def timers_of(self, rk: str) -> str:
        """ZSET timer id → due time: a route's pending timers."""
        return f"{self.prefix}:timers:route:{{{route_tag(rk)}}}"

    def timers_of_person(self, open_id: str) -> str:
        """ZSET follow-up id → due time: the pending follow-ups one person set, across every route (a cap)."""
        return f"{self.prefix}:timers:person:{open_id}"

    def timers_by_source(self, message_id: str) -> str:
        """SET of the follow-ups one request message created (a recall cancels them); expires after they are due."""
        return f"{self.prefix}:timers:source:{message_id}"

    # -- memories (memories/): what outlives sessions, per scope (people/<id>, chats/<id>, items/<id>) ---------

    def memory_files(self, scope: str) -> str:
        """HASH path → JSON {text, author, at, version, chars}: one scope's files (memories/store.py)."""
        return f"{self.prefix}:mem:{{{scope}}}:files"

    def memory_meta(self, scope: str) -> str:
        """HASH version, chars, updated_at, updated_by, dreamed_at of one scope."""
        return f"{self.prefix}:mem:{{{scope}}}:meta"

    def memory_undo(self, scope: str) -> str:
        """LIST of the scope's last changes (the files' previous states), newest first, for /memory undo."""
        return f"{self.prefix}:mem:{{{scope}}}:undo"

    def memory_log(self, scope: str) -> str:
        """LIST of the scope's changelog lines (consolidations, undos), newest first."""
        return f"{self.prefix}:mem:{{{scope}}}:log"

    @property
    def memory_changed(self) -> str:
        """ZSET scope → time of its last change (what a consolidation slot looks at)."""
        return f"{self.prefix}:mem:changed"

    @property
    def memory_scopes(self) -> str:
        """ZSET scope → time of its last change, never trimmed: every scope that holds memory (admin, console)."""
        return f"{self.prefix}:mem:scopes"

    def memory_dream_slot(self, slot: int) -> str:
        """STRING set once a consolidation slot's events were pushed (every sweeper checks it; 7 days)."""
        return f"{self.prefix}:mem:dreamed:{slot}"

    def memory_routes(self, scope: str) -> str:
        """ZSET route key → last turn: the routes a scope's memory was loaded in (consolidation reads their day); only
        for scopes that hold memory, the newest 50, expiring 2 days after the last (memories/part.py)."""
        return f"{self.prefix}:mem:{{{scope}}}:routes"

    def chat_owner(self, chat_id: str) -> str:
        """STRING the chat's owner open_id (GET chat), cached briefly; "" = none known."""
        return f"{self.prefix}:chat:owner:{chat_id}"

    def triage_buffer(self, chat_id: str, thread_id: str) -> str:
        """ZSET of a topic's unaddressed messages waiting for quiet triage (JSON member → time)."""
        return f"{self.prefix}:triage:{chat_id}:{thread_id}"

    def triage_state(self, rk: str) -> str:
        """HASH of a topic route's triage: cursor (last message time seen), last unasked post time."""
        return f"{self.prefix}:triage:state:{{{route_tag(rk)}}}"
