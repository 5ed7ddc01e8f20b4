"""What is known of each watched thread: a pull/merge request's current head, and each check's last outcome.

CI events arrive for a commit, not for a pull request: a fork's pull request comes with no `pull_requests` in the
check's payload, so a CI run is matched to the watched pull requests whose head is its commit, as learned from
`pull_request` / `Merge Request Hook` events and from the check payloads themselves. A run on an older commit than a
pull request's known head says nothing about it.

Each check's outcome is judged once per delivery (`judge`, one script): failing is news when it did not already fail
on that commit, passing is news when it failed before ("recovered"); a rerun of the same delivery gets the same
verdict, so a crash between judging and posting loses nothing. Everything expires THREAD_TTL_S after it was
written, and a thread keeps at most CHECKS_KEPT checks.
"""

from __future__ import annotations

import hashlib

import redis

from codehost import keys as ck
from codehost.links import Thread
from core.keys import Keys

THREAD_TTL_S = 30 * 86400
CHECKS_KEPT = 50

# KEYS: ci hash   ARGV: check, sha, state (failed | passed), delivery, ttl, cap → 1 news, 0 not
# Only news (or a check seen the first time) is written: the delivery that made the last change keeps its verdict
# for its reruns, whatever repeated it since.
_JUDGE = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local old = false
if raw then old = cjson.decode(raw) end
if old and old.by == ARGV[4] then return old.sig end
local sig = 0
if ARGV[3] == 'failed' then
  if not (old and old.state == 'failed' and old.sha == ARGV[2]) then sig = 1 end
elseif old and old.state == 'failed' then
  sig = 1
end
if (old and sig == 1) or (not old and redis.call('HLEN', KEYS[1]) < tonumber(ARGV[6])) then
  redis.call('HSET', KEYS[1], ARGV[1], cjson.encode({sha = ARGV[2], state = ARGV[3], by = ARGV[4], sig = sig}))
  redis.call('EXPIRE', KEYS[1], ARGV[5])
end
return sig
"""

# KEYS: head, new sha set   ARGV: sha, member, ttl, old sha set prefix
_HEAD = """
local old = redis.call('GET', KEYS[1])
if old == ARGV[1] then return 0 end
if old then redis.call('SREM', ARGV[4] .. old, ARGV[2]) end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
"""


def repo_key(provider: str, repo: str) -> str:
    return hashlib.sha1(f"{provider}|{repo}".encode()).hexdigest()[:16]


class Threads:
    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r, self.k = r, keys
        self._judge, self._head = r.register_script(_JUDGE), r.register_script(_HEAD)

    def learn_head(self, t: Thread, sha: str) -> bool:
        """A watched pull/merge request's head is now `sha`; True when it moved."""
        if not sha:
            return False
        rk = repo_key(t.provider, t.repo)
        prefix = ck.by_sha(self.k, t.provider, rk, "x")[:-1]
        return bool(self._head([ck.head(self.k, t.key), ck.by_sha(self.k, t.provider, rk, sha)],
                               [sha, f"{t.kind}:{t.number}", THREAD_TTL_S, prefix]))

    def head_of(self, t: Thread) -> str:
        return str(self.r.get(ck.head(self.k, t.key)) or "")

    def at(self, provider: str, repo: str, sha: str) -> list[tuple[str, int]]:
        """(kind, number) of the watched pull/merge requests whose known head is `sha`."""
        members = self.r.smembers(ck.by_sha(self.k, provider, repo_key(provider, repo), sha)) if sha else set()
        out = []
        for m in sorted(str(x) for x in members):
            kind, _, number = m.partition(":")
            if number.isdigit():
                out.append((kind, int(number)))
        return out

    def judge(self, t: Thread, check: str, sha: str, state: str, delivery: str) -> bool:
        """Whether this outcome of `check` is news for the thread (see the module's docstring)."""
        return bool(self._judge([ck.ci(self.k, t.key)], [check[:100], sha, state, delivery, THREAD_TTL_S,
                                                          CHECKS_KEPT]))

    def ci_states(self, t: Thread) -> dict[str, str]:
        """check → "failed"/"passed" as last judged (the console and /watching)."""
        import json

        out = {}
        for name, raw in self.r.hgetall(ck.ci(self.k, t.key)).items():
            try:
                out[str(name)] = str(json.loads(raw).get("state") or "")
            except ValueError:
                continue
        return out
