"""Code-platform webhooks (issue 33) on real Redis, without workers: what a watch is and how long it lasts, what is
known of a thread (a pull request's head, each check's last outcome), and how one stored delivery is routed to the
watching items' topics — a fork's pull request, an older commit, news and no news, a rerun after a crash."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from bitable.index import Items
from codehost.events import read, repository, wanted
from codehost.fanout import EVENT_TYPE, fan_out, topic_route
from codehost.ingress import Door, Request, Stored, hook_route
from codehost.links import GITHUB, GITLAB, ISSUE, MR, PR, RUN, Thread
from codehost.settings import CodehostSettings
from codehost.signature import (
    GITHUB_DELIVERY,
    GITHUB_EVENT,
    GITHUB_SIGNATURE,
    GITLAB_EVENT,
    GITLAB_TOKEN,
    GITLAB_UUID,
    sign_github,
)
from codehost.threads import Threads
from codehost.watches import ADDED, ALL_FULL, COMMAND, ITEM_FULL, KNOWN, MUTED, RECORD, TOPIC, Bounds, Watches
from core.inbound import Inbound
from core.keys import Keys
from runs.inbox import Inbox
from runs.runtime import Runtime
from tests.harness import service_env, settings_from, unique
from tests.test_codehost_pure import DATA, changed, example
from turn.registry import Context

NOW = 1_800_000_000.0
GITLAB_EVENT_OF = {"issue_hook": "Issue Hook", "merge_request_hook": "Merge Request Hook", "note_hook": "Note Hook",
                   "pipeline_hook": "Pipeline Hook"}
BOUNDS = Bounds(per_item=3, total=10_000, ttl_s=86400)


@pytest.fixture
def keys() -> Keys:
    return Keys(unique("chs"))


def pr(repo: str, n: int) -> Thread:
    return Thread(GITHUB, repo, PR, n)


# -- watches ------------------------------------------------------------------------------------------------------

def test_a_watch_is_added_once_renewed_when_seen_again_and_bounded_per_item(r: redis.Redis, keys: Keys) -> None:
    w = Watches(r, keys)
    assert w.add("itm_a", pr("o/r", 1), source=TOPIC, who="ou_a", now=NOW, bounds=BOUNDS) == ADDED
    assert w.add("itm_a", pr("o/r", 1), source=RECORD, who="", now=NOW + 100, bounds=BOUNDS) == KNOWN
    [one] = w.of_item("itm_a")
    assert one.source == TOPIC and one.added_by == "ou_a" and one.expires_at == NOW + 100 + BOUNDS.ttl_s
    w.add("itm_a", pr("o/r", 2), source=TOPIC, who="", now=NOW, bounds=BOUNDS)
    w.add("itm_a", pr("o/r", 3), source=TOPIC, who="", now=NOW, bounds=BOUNDS)
    assert w.add("itm_a", pr("o/r", 4), source=TOPIC, who="", now=NOW, bounds=BOUNDS) == ITEM_FULL
    assert w.add("itm_b", pr("o/r", 4), source=TOPIC, who="", now=NOW, bounds=BOUNDS) == ADDED  # another item
    assert [x.item_id for x in w.on([pr("o/r", 1)], NOW)] == ["itm_a"]


def test_the_deployment_bound_refuses_more_watches(r: redis.Redis, keys: Keys) -> None:
    w, tight = Watches(r, keys), Bounds(per_item=5, total=2, ttl_s=60)
    assert [w.add(f"itm_{n}", pr("o/r", n), source=TOPIC, who="", now=NOW, bounds=tight) for n in range(3)] == \
        [ADDED, ADDED, ALL_FULL]


def test_unwatch_mutes_the_thread_until_a_watch_command_asks_again(r: redis.Redis, keys: Keys) -> None:
    w = Watches(r, keys)
    w.add("itm_a", pr("o/r", 1), source=TOPIC, who="", now=NOW, bounds=BOUNDS)
    [one] = w.of_item("itm_a")
    assert w.remove(one, mute_until=NOW + 1000, mute_ttl_s=1000)
    assert w.on([pr("o/r", 1)], NOW) == []
    assert w.add("itm_a", pr("o/r", 1), source=RECORD, who="", now=NOW + 10, bounds=BOUNDS) == MUTED
    assert w.add("itm_a", pr("o/r", 1), source=TOPIC, who="", now=NOW + 10, bounds=BOUNDS) == MUTED
    assert w.add("itm_a", pr("o/r", 1), source=COMMAND, who="ou_b", now=NOW + 10, bounds=BOUNDS) == ADDED
    assert w.remove(w.of_item("itm_a")[0], mute_until=NOW + 20, mute_ttl_s=10)
    assert w.add("itm_a", pr("o/r", 1), source=TOPIC, who="", now=NOW + 30, bounds=BOUNDS) == ADDED  # mute over


def test_watches_expire_and_a_closed_item_moves_their_end_sooner_never_later(r: redis.Redis, keys: Keys) -> None:
    w = Watches(r, keys)
    for n in (1, 2):
        w.add("itm_a", pr("o/r", n), source=TOPIC, who="", now=NOW, bounds=BOUNDS)
    assert w.retime("itm_a", NOW + 50, sooner=True) == 2  # closed: 50 s left
    assert w.retime("itm_a", NOW + 500, sooner=True) == 0  # read closed again later: not extended
    assert w.on([pr("o/r", 1)], NOW + 60) == []  # past its end: no longer counts, even before the sweep
    assert w.sweep(NOW + 10) == 0 and w.sweep(NOW + 60) == 2
    assert w.of_item("itm_a") == [] and w.count() == 0
    assert not r.exists(*[k for k in r.scan_iter(f"{keys.prefix}:f:codehost:t:*")] or ["-"])
    w.add("itm_b", pr("o/r", 3), source=TOPIC, who="", now=NOW, bounds=BOUNDS)
    assert w.retime("itm_b", NOW + 5 * 86400, sooner=False) == 1  # open and read: renewed


# -- what is known of a thread -----------------------------------------------------------------------------------

def test_a_check_is_news_when_it_starts_failing_on_a_commit_and_when_it_recovers(r: redis.Redis, keys: Keys) -> None:
    t, known = pr("o/r", 1), Threads(r, keys)
    assert known.judge(t, "build", "sha1", "passed", "d1") is False  # green from the start: nothing to say
    assert known.judge(t, "build", "sha1", "failed", "d2") is True
    assert known.judge(t, "build", "sha1", "failed", "d3") is False  # the same failure again (another event type)
    assert known.judge(t, "build", "sha1", "failed", "d2") is True  # a rerun of d2 after a crash: the same verdict
    assert known.judge(t, "lint", "sha1", "failed", "d4") is True  # another check
    assert known.judge(t, "build", "sha2", "failed", "d5") is True  # still failing on the new head: news
    assert known.judge(t, "build", "sha3", "passed", "d6") is True  # recovered
    assert known.judge(t, "build", "sha3", "passed", "d7") is False
    assert known.ci_states(t) == {"build": "passed", "lint": "failed"}


def test_a_head_moves_and_the_commit_finds_its_pull_requests(r: redis.Redis, keys: Keys) -> None:
    known = Threads(r, keys)
    assert known.learn_head(pr("o/r", 5), "aaa") and not known.learn_head(pr("o/r", 5), "aaa")
    assert known.at(GITHUB, "o/r", "aaa") == [(PR, 5)]
    assert known.learn_head(pr("o/r", 5), "bbb")
    assert known.at(GITHUB, "o/r", "aaa") == [] and known.at(GITHUB, "o/r", "bbb") == [(PR, 5)]
    assert known.head_of(pr("o/r", 5)) == "bbb"


# -- a stored delivery's run ---------------------------------------------------------------------------------------

class Rig:
    """A runtime on the session's Redis (no worker): items claimed in the index, a delivery's run called directly."""

    def __init__(self, redis_url: str, feishu: Any, claude: Any) -> None:
        env = service_env(redis_url, feishu.url, claude.url, BOT_PROFILE=unique("chr"))
        self.rt = Runtime(settings_from(env), redis_url)
        self.profile = self.rt.settings.bot_profile

    def item(self) -> tuple[str, str]:
        chat, thread = unique("oc_c"), unique("omt")
        item, _ = Items(self.rt.state, self.rt.keys).claim(thread_id=thread, chat_id=chat, root_id=unique("om"),
                                                            origin="test")
        return item.item_id, topic_route(self.profile, chat, thread)

    def watch(self, item_id: str, t: Thread) -> None:
        Watches(self.rt.state, self.rt.keys).add(item_id, t, source=TOPIC, who="", now=NOW, bounds=BOUNDS)

    def run(self, provider: str, event: str, payload: dict[str, Any], delivery: str | None = None) -> str:
        repo = (payload.get("repository") or {}).get("full_name") or payload["project"]["path_with_namespace"]
        stored = Stored.received(provider, event, delivery or unique("d"), payload, json.dumps(payload))
        rk = hook_route(self.profile, provider, repo.lower())
        m = Inbound(event_id="e", message_id="e", chat_id="", chat_type="hook", sender_type="app",
                    message_type="codehost_delivery", text=stored.head(), content=stored.content())
        return fan_out(Context(self.rt, rk, (m,), "batch", lambda: True))

    def told(self, rk: str) -> list[dict[str, Any]]:
        raw = self.rt.state.lrange(self.rt.keys.inbox(rk), 0, -1)
        return [json.loads(json.loads(x)["content"]) for x in raw if json.loads(x)["message_type"] == EVENT_TYPE]


@pytest.fixture
def rig(redis_url: str, feishu: Any, claude: Any) -> Rig:
    return Rig(redis_url, feishu, claude)


def ci_payload(event: str, repo: str, conclusion: str, sha: str, prs: list[int]) -> dict[str, Any]:
    name = {"check_run": "check_run.completed.payload", "check_suite": "check_suite.completed.payload",
            "workflow_run": "workflow_run.completed.with-pull-requests.payload"}[event]
    base = changed(example("github", name), repository__full_name=repo)
    run = base[event]
    run.update(conclusion=conclusion, head_sha=sha)
    template = run["pull_requests"][0] if run["pull_requests"] else {"head": {}, "base": {}}
    run["pull_requests"] = [{**template, "number": n, "head": {**template["head"], "sha": sha}} for n in prs]
    return base


def test_a_forks_pull_request_gets_its_ci_through_the_head_its_pull_request_event_named(rig: Rig) -> None:
    item_id, rk = rig.item()
    repo = f"o/{unique('fork').lower()}"
    rig.watch(item_id, pr(repo, 2))
    sync = changed(example("github", "pull_request.synchronize.payload"), repository__full_name=repo,
                   pull_request__number=2, pull_request__head__sha="f0f0f0")
    assert "head of" in rig.run(GITHUB, "pull_request", sync)
    # a check on the fork's commit: GitHub names no pull request (pull_requests is empty for forks)
    assert "1 item(s) told" in rig.run(GITHUB, "check_run", ci_payload("check_run", repo, "failure", "f0f0f0", []))
    [event] = rig.told(rk)
    assert event["item_id"] == item_id and event["happening"]["state"] == "failed" and event["threads"] == [["pr", 2]]


def test_a_check_on_an_older_commit_than_the_known_head_says_nothing(rig: Rig) -> None:
    item_id, rk = rig.item()
    repo = f"o/{unique('old').lower()}"
    rig.watch(item_id, pr(repo, 2))
    rig.run(GITHUB, "pull_request", changed(example("github", "pull_request.synchronize.payload"),
                                            repository__full_name=repo, pull_request__head__sha="new"))
    out = rig.run(GITHUB, "check_run", ci_payload("check_run", repo, "failure", "old", []))
    assert rig.told(rk) == [] and "no watched pull request has head old" in out
    out = rig.run(GITHUB, "workflow_run", ci_payload("workflow_run", repo, "failure", "older", []))
    assert rig.told(rk) == [], out
    # GitLab names the merge request in every pipeline of it, also one that ends after a newer push
    project = f"g/{unique('oldmr').lower()}"
    item2, rk2 = rig.item()
    rig.watch(item2, Thread(GITLAB, project, MR, 1))
    pushed = changed(example("gitlab", "merge_request_hook"), project__path_with_namespace=project,
                     object_attributes__action="update", object_attributes__last_commit__id="beef2")
    assert "head of" in rig.run(GITLAB, "Merge Request Hook", pushed)
    stale = changed(example("gitlab", "pipeline_hook"), project__path_with_namespace=project,
                    object_attributes__status="failed", object_attributes__sha="beef1")
    assert "not its head" in rig.run(GITLAB, "Pipeline Hook", stale) and rig.told(rk2) == []
    fresh = changed(stale, object_attributes__sha="beef2")
    assert "1 item(s) told" in rig.run(GITLAB, "Pipeline Hook", fresh)


def test_one_failure_told_once_whatever_redelivers_or_reruns_it(rig: Rig) -> None:
    item_id, rk = rig.item()
    repo = f"o/{unique('once').lower()}"
    rig.watch(item_id, pr(repo, 2))
    failed = ci_payload("check_run", repo, "failure", "abc", [2])
    rig.run(GITHUB, "check_run", failed, delivery="d-1")
    rig.run(GITHUB, "check_run", failed, delivery="d-1")  # a rerun of the same run after a crash
    assert "no news" in rig.run(GITHUB, "check_run", failed, delivery="d-2")  # the same failure, another delivery
    assert len(rig.told(rk)) == 1
    assert "1 item(s) told" in rig.run(GITHUB, "check_run", ci_payload("check_run", repo, "success", "abd", [2]))
    assert [e["happening"]["state"] for e in rig.told(rk)] == ["failed", "passed"]


def test_every_watching_item_is_told_and_an_issue_link_of_a_pull_request_counts(rig: Rig) -> None:
    (a, rk_a), (b, rk_b), (c, rk_c) = rig.item(), rig.item(), rig.item()
    repo = f"o/{unique('many').lower()}"
    rig.watch(a, pr(repo, 2))
    rig.watch(b, Thread(GITHUB, repo, ISSUE, 2))  # linked as /issues/2: the same number, the same thread
    rig.watch(c, pr(repo, 3))
    merged = changed(example("github", "pull_request.closed.payload"), repository__full_name=repo,
                     pull_request__merged=True)
    assert "2 item(s) told" in rig.run(GITHUB, "pull_request", merged)
    assert [len(rig.told(rk)) for rk in (rk_a, rk_b, rk_c)] == [1, 1, 0]


def test_an_actions_run_and_a_gitlab_pipeline_can_be_watched_themselves(rig: Rig) -> None:
    item_id, rk = rig.item()
    repo = f"o/{unique('run').lower()}"
    rig.watch(item_id, Thread(GITHUB, repo, RUN, 289782451))
    assert "1 item(s) told" in rig.run(GITHUB, "workflow_run",
                                       ci_payload("workflow_run", repo, "failure", "zzz", []))
    project = f"g/{unique('pipe').lower()}"
    item2, rk2 = rig.item()
    rig.watch(item2, Thread(GITLAB, project, MR, 1))
    failed = changed(example("gitlab", "pipeline_hook"), object_attributes__status="failed",
                     project__path_with_namespace=project)
    assert "1 item(s) told" in rig.run(GITLAB, "Pipeline Hook", failed)
    assert rig.told(rk)[0]["threads"] == [["run", 289782451]] and rig.told(rk2)[0]["threads"] == [["mr", 1]]


def test_a_comment_is_told_to_the_watching_topic_for_triage(rig: Rig) -> None:
    item_id, rk = rig.item()
    project = f"g/{unique('note').lower()}"
    rig.watch(item_id, Thread(GITLAB, project, MR, 1))
    note = changed(example("gitlab", "note_hook.merge_request"), project__path_with_namespace=project)
    rig.run(GITLAB, "Note Hook", note)
    [event] = rig.told(rk)
    assert event["happening"]["kind"] == "comment" and event["happening"]["text"] == "This MR needs work."


def _entry(stored: Stored) -> Inbound:
    return Inbound(event_id="e", message_id="e", chat_id="", chat_type="hook", sender_type="app",
                   message_type="codehost_delivery", text=stored.head(), content=stored.content())


PUBLISHED = [(GITHUB, p.name.split(".")[0], p) for p in sorted((DATA / "github").glob("*.json"))] + \
    [(GITLAB, GITLAB_EVENT_OF[p.name.split(".")[0]], p) for p in sorted((DATA / "gitlab").glob("*.json"))]


@pytest.mark.parametrize("provider, event, path", PUBLISHED, ids=[p.name for _, _, p in PUBLISHED])
def test_the_door_stores_what_its_run_reads_of_every_published_payload(r: redis.Redis, keys: Keys, provider: str,
                                                                       event: str, path: Any) -> None:
    """The door stores the delivery's happenings, not its body: what the run gets back from Redis is what
    `events.read` makes of the whole payload (variants: a failed CI, a merge, changes requested, a long comment)."""
    base = json.loads(path.read_text(encoding="utf-8"))
    variants = [base]
    for run in ("check_run", "check_suite", "workflow_run"):
        if isinstance(base.get(run), dict):
            variants.append(changed(base, **{f"{run}__conclusion": "failure"}))
    if isinstance(base.get("pull_request"), dict) and base.get("action") == "closed":
        variants.append(changed(base, pull_request__merged=not base["pull_request"].get("merged")))
    if isinstance(base.get("review"), dict):
        variants.append(changed(base, review__state="changes_requested", review__body="请改 " * 800))
    if isinstance(base.get("object_attributes"), dict) and "status" in base["object_attributes"]:
        variants.append(changed(base, object_attributes__status="failed"))
    settings = CodehostSettings(github_webhook_secret="s", gitlab_webhook_token="t")
    door = Door(Inbox(r, keys, 60_000), r, keys, "q", settings)
    acted = 0
    for n, payload in enumerate(variants):
        body = json.dumps(payload).encode()
        headers = {GITHUB_EVENT: event, GITHUB_DELIVERY: f"d-{n}", GITHUB_SIGNATURE: sign_github("s", body)} \
            if provider == GITHUB else {GITLAB_EVENT: event, GITLAB_UUID: f"u-{n}", GITLAB_TOKEN: "t"}
        answer = (door.github if provider == GITHUB else door.gitlab)(Request(headers, body))
        if answer.body.get("msg") != "accepted":
            assert not wanted(provider, event, payload) or answer.body.get("msg") == "pong"
            continue
        rk = hook_route(keys.profile, provider, repository(provider, payload))
        entry = Inbound.model_validate_json(r.lrange(keys.inbox(rk), -1, -1)[0])
        stored = Stored.of(entry)
        assert stored.read and stored.happenings() == read(provider, event, payload)
        assert len(entry.content) < 3000 <= len(body) or len(body) < 3000  # the body is not what is kept
        acted += bool(stored.happenings())
    assert acted or not any(wanted(provider, event, p) and read(provider, event, p) for p in variants)


def test_a_delivery_is_read_back_in_every_stored_layout() -> None:
    """The door's layout (the happenings), and the two before it, still queued after an upgrade: the body in
    content with the head in text, and all of it in content. A body the door could not read is stored whole."""
    payload = changed(example("github", "check_run.completed.payload"), check_run__conclusion="failure")
    body = json.dumps(payload)
    new = Stored.received(GITHUB, "check_run", "d-1", payload, body)
    kept = Stored(GITHUB, "check_run", "d-1", body, read=False)
    old = Inbound(event_id="e", message_id="e", chat_id="", chat_type="hook", sender_type="app",
                  message_type="codehost_delivery", text="", content=json.dumps(
                      {"provider": "github", "event": "check_run", "delivery": "d-1", "body": body}))
    happenings = read(GITHUB, "check_run", payload)
    assert happenings and happenings[0].state == "failed"
    for stored in (Stored.of(_entry(new)), Stored.of(_entry(kept)), Stored.of(old)):
        assert stored.happenings() == happenings
    assert Stored.of(_entry(new)).read and not Stored.of(_entry(kept)).read and not Stored.of(old).read
    for broken in ("{", '{"a": 1}', '[{"kind": "ci"}]', "[1]"):
        with pytest.raises(ValueError):
            Stored(GITHUB, "check_run", "d-1", broken).happenings()
