"""Long-connection ingest: events/s through the `ws` process into Redis vs the webhook (gunicorn), same machine.

Both sides store the same kind of events (p2p messages over many routes, each stored by PUSH) in one embedded
Redis, under profiles of their own. The webhook gets signed, encrypted bodies (built before the clock starts)
from `--clients` keep-alive connections; the ws side gets the same events pushed by the emulated long-connection
endpoint to `--ws` processes (cluster delivery), and counts an event once its 200 ack frame arrived. No worker
runs: this measures ingest only. The ratio ws/webhook is the result.

    python -m bench.longconn [--events 2000] [--routes 100] [--ws 1] [--clients 8] [--reps 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis

from core.keys import Keys
from sandbox.feishu.emulator import FeishuEmulator
from sandbox.feishu.events import message_event, signed_request
from state.embedded import ensure_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
GUNICORN = Path(sys.executable).parent / "gunicorn"
APP_ID, APP_SECRET = "cli_bench", "bench-app-secret"
ENCRYPT_KEY, TOKEN = "bench-encrypt-key", "bench-verification-token"


def env_for(redis_url: str, feishu_url: str, profile: str, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FEISHU_", "ANTHROPIC_", "ROUTING_"))}
    return {**base, "PYTHONPATH": str(ROOT), "ENV_FILE": os.devnull, "FEISHU_APP_ID": APP_ID,
            "FEISHU_APP_SECRET": APP_SECRET, "FEISHU_VERIFICATION_TOKEN": TOKEN, "FEISHU_ENCRYPT_KEY": ENCRYPT_KEY,
            "FEISHU_DOMAIN": feishu_url, "ANTHROPIC_API_KEY": "sk-bench", "REDIS_URL": redis_url,
            "BOT_PROFILE": profile, "LOG_LEVEL": "WARNING", **extra}


def events(n: int, routes: int, tag: str) -> list[dict[str, Any]]:
    return [message_event(chat_id=f"oc_{tag}_{i % routes}", text=f"{tag} 消息 {i}", token=TOKEN, app_id=APP_ID)
            for i in range(n)]


def stored(r: redis.Redis, profile: str) -> int:
    """Events PUSH stored (each leaves one message-dedupe key)."""
    return sum(1 for _ in r.scan_iter(f"{Keys(profile).prefix}:seen:m:*", count=1000))


# -- webhook ---------------------------------------------------------------------------------------------------

def webhook_rate(env: dict[str, str], scratch: Path, payloads: list[dict[str, Any]], clients: int) -> float:
    port = _free_port()
    log = open(scratch / "gunicorn.log", "wb")  # noqa: SIM115  (closed below)
    proc = subprocess.Popen([str(GUNICORN), "-c", str(ROOT / "gunicorn.conf.py"), "--bind", f"127.0.0.1:{port}",
                             "app:app"], env={**env, "PATH": f"{GUNICORN.parent}:{env.get('PATH', '')}"},
                            cwd=scratch, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait(lambda: _status(port, "/healthz") == 200, 90, "gunicorn")
        bodies = [signed_request(p, encrypt_key=ENCRYPT_KEY) for p in payloads]
        shares = [bodies[i::clients] for i in range(clients)]
        failures: list[int] = []
        threads = [threading.Thread(target=_post_all, args=(port, share, failures)) for share in shares]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        if failures:
            raise RuntimeError(f"webhook answered {len(failures)} events with {sorted(set(failures))}")
        return len(payloads) / elapsed
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # its own session: only the master and its workers
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


def _post_all(port: int, share: list[tuple[bytes, dict[str, str]]], failures: list[int]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for body, headers in share:
        conn.request("POST", "/feishu/events", body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            failures.append(resp.status)
    conn.close()


# -- long connection -------------------------------------------------------------------------------------------

def ws_rate(env: dict[str, str], scratch: Path, emu: FeishuEmulator, payloads: list[dict[str, Any]],
            processes: int) -> float:
    ws_env = {**env, "FEISHU_CONNECTION_MODE": "websocket"}
    procs = [subprocess.Popen([sys.executable, "-m", "bot.longconn"], env=ws_env, cwd=scratch,
                              stdout=open(scratch / f"ws{i}.log", "wb"),  # noqa: SIM115
                              stderr=subprocess.STDOUT, start_new_session=True) for i in range(processes)]
    try:
        _wait(lambda: len(emu.ws_clients()) >= processes, 60, "ws clients")
        emu.ws.redeliver_after = 600.0  # a slow ack under load is not a lost one here
        emu.ws.reset()
        wanted = {p["header"]["event_id"] for p in payloads}
        started = time.perf_counter()
        for payload in payloads:
            emu.ws_push(payload)
        _wait(lambda: emu.ws.acked() >= len(wanted), 600, "acks", 0.02)
        elapsed = time.perf_counter() - started
        refused = [a for a in emu.ws_acks() if a["code"] != 200]
        if refused:
            raise RuntimeError(f"{len(refused)} events not acknowledged")
        return len(payloads) / elapsed
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=20)


# -- plumbing ----------------------------------------------------------------------------------------------------

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(port: int, path: str) -> int | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def _wait(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(interval)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.longconn", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=2000)
    p.add_argument("--routes", type=int, default=100)
    p.add_argument("--ws", type=int, default=1, help="ws processes connected at once (cluster delivery)")
    p.add_argument("--clients", type=int, default=8, help="concurrent webhook connections")
    p.add_argument("--reps", type=int, default=3, help="alternating webhook/ws rounds; medians are reported")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    scratch = Path(tempfile.mkdtemp(prefix="fbb-"))
    emu = FeishuEmulator(app_id=APP_ID, app_secret=APP_SECRET).start()
    url = ensure_server(str(scratch / "var"))
    r = redis.Redis.from_url(url, decode_responses=True)
    pairs, complete = [], True
    try:
        for rep in range(args.reps):  # alternating, so a busy moment of the machine hits both sides alike
            stamp = f"{int(time.time())}r{rep}"
            hook_profile, ws_profile = f"bhook{stamp}", f"bws{stamp}"
            hook = webhook_rate(env_for(url, emu.url, hook_profile), scratch,
                                events(args.events, args.routes, f"h{rep}"), args.clients)
            ws = ws_rate(env_for(url, emu.url, ws_profile), scratch, emu, events(args.events, args.routes, f"w{rep}"),
                         args.ws)
            complete &= stored(r, hook_profile) == args.events and stored(r, ws_profile) == args.events
            pairs.append((hook, ws))
            print(f"rep {rep + 1}: webhook {hook:.0f} events/s, ws {ws:.0f} events/s, ratio {ws / hook:.2f}",
                  flush=True)
        hook_m, ws_m = statistics.median(h for h, _ in pairs), statistics.median(w for _, w in pairs)
        ratio = statistics.median(w / h for h, w in pairs)
        report = {"events": args.events, "routes": args.routes, "reps": args.reps, "ws_processes": args.ws,
                  "webhook_clients": args.clients, "webhook_events_per_s_median": round(hook_m, 1),
                  "ws_events_per_s_median": round(ws_m, 1), "ratio_ws_to_webhook_median": round(ratio, 3),
                  "every_event_stored": complete, "cpus": os.cpu_count(), "load_avg": os.getloadavg()[0]}
        print(json.dumps(report, ensure_ascii=False))
        print(f"long-connection ingest: {ws_m:.0f} events/s with {args.ws} ws process(es) vs webhook {hook_m:.0f} "
              f"events/s ({args.clients} connections): ratio {ratio:.2f} (median of {args.reps})")
        return 0 if complete else 1
    finally:
        emu.stop()
        stop_server(str(scratch / "var"))
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
