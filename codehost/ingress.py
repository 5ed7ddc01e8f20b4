"""The two webhooks' request path, framework-neutral (style.md §2, §18): verify the sender → the event type → parse
the minimum (its repository and action) → one PUSH into the repository's internal route (dedupe, append and kick in
one script) → ack. No Feishu, Bitable or model call; what the delivery means is learned by its run (fanout.py).

Answers: 200 once stored (or a redelivery recognised); 200 and ignored for event types and actions not handled,
and for a `ping`; 401 with nothing stored for a missing or wrong signature/token; 400 with nothing stored for a
body that is not a JSON object naming its repository; 413 over CODEHOST_MAX_BODY_BYTES (web.py); 503 when Redis
is down, so the sender's delivery shows failed and can be redelivered. Never a 500.

Dedupe: GitHub by `X-GitHub-Delivery` (one id per event, shared by every webhook it goes to, kept on a manual
redelivery); GitLab by `Idempotency-Key` (the same across retries and "Resend request", GitLab ≥ 17.4), else
`X-Gitlab-Event-UUID` with the event type (GitLab gives a webhook that another one triggered the same UUID), else
the body; and both by a hash of the body, which a redelivery repeats byte for byte (GitHub's: its verified
HMAC-SHA256, the signature header itself, so the 14 KB body is hashed once). Recognised for DEDUPE_TTL_S:
longer than the manual redeliveries GitHub allows (3 days on github.com, 7 on GitHub Enterprise Server).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import orjson
import redis

from codehost import deliveries
from codehost.deliveries import DUPLICATE, IGNORED, REFUSED
from codehost.events import GITHUB_ACTIONS, Happening, read, repository, wanted
from codehost.links import GITHUB, GITLAB
from codehost.settings import CodehostSettings
from codehost.signature import (
    GITHUB_DELIVERY,
    GITHUB_EVENT,
    GITHUB_SIGNATURE,
    GITLAB_EVENT,
    GITLAB_IDEMPOTENCY,
    GITLAB_TOKEN,
    GITLAB_UUID,
    github_signed,
    gitlab_signed,
)
from core.inbound import Inbound, dumps
from core.keys import Keys
from runs.inbox import Inbox, Pushed

log = logging.getLogger(__name__)
DELIVERY_TYPE = "codehost_delivery"  # the inbox entry of a stored delivery, on its repository's route
ROUTE_KIND = "hook"  # `feishu:<profile>:hook:<provider>:<repo>`: one route per repository keeps its events in order
DEDUPE_TTL_S = 8 * 86400  # GitHub.com lets one redeliver 3 days back, GitHub Enterprise Server 7
ID_CHARS = 100


@dataclass(frozen=True)
class Request:
    headers: Mapping[str, str]  # case-insensitive lookups (the web's headers)
    body: bytes
    mimetype: str = "application/json"


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any] = field(default_factory=lambda: {"msg": "accepted"})


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def hook_route(profile: str, provider: str, repo: str) -> str:
    return f"feishu:{profile}:{ROUTE_KIND}:{provider}:{repo}"


@dataclass(frozen=True)
class Stored:
    """What the inbox entry carries: the delivery as the door read it — its happenings (`events.read` of the parsed
    payload, a few hundred bytes where a `check_run` body is ~14 KB: bench.hooks) as the entry's `content`, its
    provider, event type and id in `text`. Nothing of the payload that `read` does not take is stored, and the body's
    hash stays the dedupe key. Entries written before (the body as received in `content`, or all of it there) are
    read by their run as before, as is a body the door could not read (`read` failed: the run tries again and the
    delivery is dead-lettered there, not lost at the door)."""

    provider: str
    event: str
    delivery: str
    body: str  # the happenings as a JSON list (`read`), or the delivery's body as received
    read: bool = True

    @classmethod
    def received(cls, provider: str, event: str, delivery: str, payload: Mapping[str, Any], body: str) -> Stored:
        try:
            happenings = read(provider, event, payload)
        except Exception:  # a payload events.read trips on: keep it whole for the run, which dead-letters it
            log.exception("webhook payload not read at the door; stored whole",
                          extra={"reason_detail": f"{provider} {event} {delivery}"})
            return cls(provider, event, delivery, body, read=False)
        return cls(provider, event, delivery, json.dumps([h.to_json() for h in happenings], ensure_ascii=False))

    def head(self) -> str:
        head: dict[str, Any] = {"provider": self.provider, "event": self.event, "delivery": self.delivery}
        return json.dumps({**head, "read": 1} if self.read else head)

    def content(self) -> str:
        return self.body

    def happenings(self) -> list[Happening]:
        """What happened, as the door read it (or read now from an entry holding the body). ValueError: unreadable."""
        data = json.loads(self.body)
        if not self.read:
            return read(self.provider, self.event, data) if isinstance(data, dict) else []
        if not isinstance(data, list):
            raise ValueError("the stored happenings are not a list")
        try:
            return [Happening.from_json(x) for x in data]
        except (TypeError, AttributeError) as exc:
            raise ValueError(f"a stored happening is malformed: {exc}") from None

    @classmethod
    def of(cls, m: Inbound) -> Stored:
        if not m.text:  # written before the body was stored apart: all of it in content
            data = json.loads(m.content)
            return cls(str(data["provider"]), str(data["event"]), str(data["delivery"]), str(data["body"]),
                       read=False)
        head = json.loads(m.text)
        return cls(str(head["provider"]), str(head["event"]), str(head["delivery"]), m.content,
                   read=bool(head.get("read")))


class Door:
    """Both webhooks of one web process (its runtime's inbox and Redis)."""

    def __init__(self, inbox: Inbox, r: redis.Redis, keys: Keys, queue: str, s: CodehostSettings) -> None:
        self.inbox, self.r, self.keys, self.queue, self.s = inbox, r, keys, queue, s
        self.repos = {x.strip().lower() for x in s.codehost_repos if x.strip()}

    def github(self, req: Request) -> Answer:
        return self._guarded(GITHUB, req, self._github)

    def gitlab(self, req: Request) -> Answer:
        return self._guarded(GITLAB, req, self._gitlab)

    def _guarded(self, provider: str, req: Request, handle: Callable[[Request, dict[str, str]], Answer]) -> Answer:
        ctx: dict[str, str] = {"provider": provider}
        try:
            return handle(req, ctx)
        except Refused as r:
            deliveries.note(self.r, self.keys, REFUSED, r.reason, **ctx)
            log.warning("webhook refused", extra={"reason": r.reason, "status": r.status, **_logged(ctx)})
            return Answer(r.status, {"error": r.reason})
        except redis.RedisError as exc:
            log.error("webhook not stored: state store unavailable",
                      extra={"status": 503, "error": exc.__class__.__name__, **_logged(ctx)})
            return Answer(503, {"error": "state store unavailable, retry later"})
        except Exception:
            log.exception("webhook failed", extra={"status": 503, **_logged(ctx)})
            return Answer(503, {"error": "internal error, retry later"})

    # -- GitHub ------------------------------------------------------------------------------------------

    def _github(self, req: Request, ctx: dict[str, str]) -> Answer:
        signature = req.headers.get(GITHUB_SIGNATURE)
        if not github_signed(self.s.secret("github_webhook_secret"), signature, req.body):
            raise Refused(401, "missing or wrong X-Hub-Signature-256")
        event = _header(req, GITHUB_EVENT)
        ctx.update(event=event, delivery=_header(req, GITHUB_DELIVERY))
        if not event:
            raise Refused(400, "no X-GitHub-Event header")
        if event == "ping":  # GitHub's check of a new webhook: nothing to store
            deliveries.note(self.r, self.keys, IGNORED, "ping", **ctx)
            return Answer(200, {"msg": "pong"})
        if event not in GITHUB_ACTIONS:
            return self._ignored(ctx, f"event type {event} not handled")
        digest = str(signature).strip()[len("sha256="):][:40]  # verified: the body's keyed hash, as good as its own
        delivery = ctx["delivery"] or f"body-{digest}"
        text = _text(req.body if req.mimetype != "application/x-www-form-urlencoded" else _form(req.body))
        return self._store(GITHUB, event, text, ctx, (f"gh:{delivery}", f"gh:c:{digest}"), delivery)

    # -- GitLab ------------------------------------------------------------------------------------------

    def _gitlab(self, req: Request, ctx: dict[str, str]) -> Answer:
        if not gitlab_signed(self.s.secret("gitlab_webhook_token"), req.headers.get(GITLAB_TOKEN)):
            raise Refused(401, "missing or wrong X-Gitlab-Token")
        event = _header(req, GITLAB_EVENT)
        idem, uuid = _header(req, GITLAB_IDEMPOTENCY), _header(req, GITLAB_UUID)
        ctx.update(event=event, delivery=idem or uuid)
        if not event:
            raise Refused(400, "no X-Gitlab-Event header")
        digest = hashlib.sha256(event.encode() + b"\n" + req.body).hexdigest()[:40]
        first = f"gl:i:{idem}" if idem else f"gl:u:{uuid}:{event}" if uuid else f"gl:c:{digest}"
        return self._store(GITLAB, event, _text(req.body), ctx, (first, f"gl:c:{digest}"),
                           idem or uuid or f"body-{digest}")

    # -- both ----------------------------------------------------------------------------------------------

    def _store(self, provider: str, event: str, text: str, ctx: dict[str, str], dedupe: tuple[str, str],
               delivery: str) -> Answer:
        payload = _json(text)
        repo = repository(provider, payload)
        ctx["repo"] = repo
        if not wanted(provider, event, payload):
            return self._ignored(ctx, f"{event} {payload.get('action') or ''!s}".strip() + " not handled")
        if not repo:
            raise Refused(400, "the payload names no repository")
        if self.repos and repo not in self.repos:
            return self._ignored(ctx, "repository not in CODEHOST_REPOS")
        stored = Stored.received(provider, event, delivery, payload, text)  # what its run reads
        entry = Inbound(event_id=dedupe[0], message_id=dedupe[0], chat_id="", chat_type=ROUTE_KIND, sender_type="app",
                        message_type=DELIVERY_TYPE, text=stored.head(), content=stored.content(),
                        create_time=str(int(time.time() * 1000)))
        pushed = self.inbox.push(hook_route(self.keys.profile, provider, repo), dumps(entry), message_id=dedupe[0],
                                 content_key=dedupe[1], queue=self.queue, also=Pushed(dedupe_ttl_s=DEDUPE_TTL_S))
        if pushed.duplicate:
            deliveries.note(self.r, self.keys, DUPLICATE, "a redelivery: stored once already", **ctx)
            return Answer(200, {"msg": "duplicate"})
        return Answer(200, {"msg": "accepted"})

    def _ignored(self, ctx: dict[str, str], reason: str) -> Answer:
        deliveries.note(self.r, self.keys, IGNORED, reason, **ctx)
        return Answer(200, {"msg": "ignored"})


def _header(req: Request, name: str) -> str:
    return str(req.headers.get(name) or "").strip()[:ID_CHARS]


def _text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(400, "the body is not UTF-8") from None


def _json(text: str) -> dict[str, Any]:
    """The payload. orjson first (bench.hooks: the door's largest cost); what it refuses and the standard library takes
    (a lone surrogate escape, NaN) is read by `json.loads`, so both give the same answers, but for an integer past 64
    bits, which orjson reads as a float (no number the door or its run reads is one: `events._n`)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = _json_std(text)
    if not isinstance(value, dict):
        raise Refused(400, "the body is not a JSON object")
    return value


def _json_std(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise Refused(400, "the body is nested too deeply") from None
    except ValueError:
        raise Refused(400, "the body is not JSON") from None


def _form(body: bytes) -> bytes:
    """GitHub's `application/x-www-form-urlencoded` content type: the JSON is the `payload` field."""
    try:
        return parse_qs(body.decode("utf-8"), strict_parsing=True)["payload"][0].encode("utf-8")
    except (ValueError, KeyError, UnicodeDecodeError):
        raise Refused(400, "a form body without a payload field") from None


def _logged(ctx: Mapping[str, str]) -> dict[str, str]:
    return {"reason_detail": f"{ctx.get('provider', '')} {ctx.get('event', '')} {ctx.get('delivery', '')}".strip()}
