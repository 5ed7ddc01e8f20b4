"""Framework-neutral ingress: verify → decrypt → parse → admit → route → push. No Open API or model calls."""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis
from pydantic import BaseModel, ValidationError

from bot.crypto import SIGNATURE_HEADER, DecryptError, SignatureError, SignatureVerifier, decrypt
from bot.envelope import MESSAGE_RECEIVE, Envelope, MessageEvent, to_inbound
from bot.side_events import SIDE_EVENTS, Bad, SideEvents
from core import metrics
from core.clock import Clock
from core.inbound import Inbound, dumps
from core.keys import Keys
from core.settings import Settings
from feishu import identity
from feishu.message import ContentError, first_error, has_lone_surrogate
from memory import related
from memory.sessions import new_session_id
from routing.admission import IDENTITY_UNKNOWN, admit
from routing.keys import route_for
from routing.policy import policy_from
from runs.inbox import Inbox, Pushed
from turn import registry
from turn.registry import App

# Admission reasons of group messages that simply did not address the bot (routing/admission.py).
UNADDRESSED = ("not mentioned", "mention-all only")

log = logging.getLogger(__name__)
REJECTED_KEPT = 1000
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Request:
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class Response:
    status: int
    body: dict[str, Any] = field(default_factory=lambda: {"msg": "success"})


class Reject(Exception):
    """Ends a request with a deliberate status; the message is safe to show the caller."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _json_object(raw: bytes | str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except RecursionError:  # the decoder recurses per nesting level; the input decides how deep
        raise Reject(400, f"{what} is nested too deeply") from None
    except ValueError:  # includes UnicodeDecodeError
        raise Reject(400, f"{what} is not valid JSON") from None
    if not isinstance(value, dict):
        raise Reject(400, f"{what} is not a JSON object")
    return value


@dataclass(frozen=True)
class Authentic:
    payload: dict[str, Any]
    raw: bytes | str  # the JSON text `payload` was parsed from (decrypted when it came encrypted)
    signed: bool


class Ingress:
    def __init__(self, settings: Settings, state: redis.Redis, app: App | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings, self.state = settings, state
        self.app = app or registry.load_app(settings)  # commands: what resets a route; actions: what a click is
        self.keys = Keys(settings.bot_profile)
        self.bot_open_id = identity.CachedOpenId(state, self.keys)
        self.inbox = Inbox(state, self.keys, int(settings.run_lease_seconds * 1000),
                           session_retention_s=settings.session_retention_s,
                           route_retention_s=settings.route_retention_s)
        self.policy = policy_from(settings)
        self.encrypt_key = settings.secret("feishu_encrypt_key")
        self.token = settings.secret("feishu_verification_token")
        self.verifier = SignatureVerifier(self.encrypt_key, settings.signature_window_seconds, clock)
        self.side = SideEvents(settings, state, self.keys, self.inbox, self.policy, self.app)
        self.clock = Clock(state, self.keys, adjustable=settings.adjustable_clock)

    def handle(self, req: Request) -> Response:
        """The webhook transport: an HTTP request as Feishu posts it (authenticated here)."""
        return self._observed(lambda ctx: self._handle(req, ctx))

    def handle_event(self, payload: dict[str, Any], raw: bytes | str) -> Response:
        """The long-connection transport: an event the authenticated connection delivered (no signature,
        no encryption, no token). The same admission → routing → PUSH path; a 5xx status means it was
        not stored, so the caller must not acknowledge it."""
        return self._observed(lambda ctx: self._authentic_event(payload, raw, ctx))

    def _observed(self, run: Callable[[dict[str, Any]], Response]) -> Response:
        started = time.perf_counter()
        ctx: dict[str, Any] = {}
        try:
            response = run(ctx)
        except Reject as r:
            response = Response(r.status, {"error": r.message})
            level = logging.WARNING if r.status != 503 else logging.ERROR
            log.log(level, "event rejected", extra={**ctx, "status": r.status, "reason": r.message})
        except redis.RedisError as exc:
            response = Response(503, {"error": "state store unavailable, retry later"})
            log.error("state store unavailable", extra={**ctx, "status": 503, "error": exc.__class__.__name__})
        except Exception:
            response = Response(503, {"error": "internal error, retry later"})
            log.exception("ingress failed", extra={**ctx, "status": 503})
        metrics.observe_ingest(response.status, ctx.get("outcome", "rejected"), time.perf_counter() - started)
        return response

    def _authenticate(self, req: Request) -> Authentic:
        """401 only when authentication fails; a signed body we cannot read is malformed (400)."""
        outer = _json_object(req.body, "body")
        signed = bool(req.headers.get(SIGNATURE_HEADER))
        if signed:
            try:
                self.verifier.verify(req.headers, req.body)
            except SignatureError as exc:
                raise Reject(401, f"bad signature: {exc}") from None
        payload, raw = outer, req.body  # type: tuple[dict[str, Any], bytes | str]
        if "encrypt" in outer:
            try:
                raw = decrypt(str(outer["encrypt"]), self.encrypt_key)
            except DecryptError:
                if not signed:  # unsigned: nothing says it came from Feishu, so it is an authentication failure
                    raise Reject(401, "cannot decrypt: wrong encrypt key or tampered body") from None
                self._keep_rejected(outer)
                raise Reject(400, "signed body whose encrypt field cannot be decrypted") from None
            payload = _json_object(raw, "decrypted body")
        header = payload.get("header")
        header = header if isinstance(header, dict) else {}
        token = payload.get("token") or header.get("token") or ""
        if not isinstance(token, str) or not hmac.compare_digest(token.encode("utf-8", "surrogatepass"),
                                                                 self.token.encode()):
            raise Reject(401, "verification token mismatch")
        return Authentic(payload, raw, signed)

    def _handle(self, req: Request, ctx: dict[str, Any]) -> Response:
        auth = self._authenticate(req)
        payload = auth.payload
        self._check_text(auth.raw, payload, keep=auth.signed)
        if payload.get("type") == "url_verification":
            challenge = payload.get("challenge")
            if not isinstance(challenge, str):
                raise Reject(400, "url_verification without a challenge")
            ctx["outcome"] = "challenge"
            return Response(200, {"challenge": challenge})
        if not auth.signed:
            raise Reject(401, "missing signature headers")
        return self._event(payload, ctx)

    def _authentic_event(self, payload: dict[str, Any], raw: bytes | str, ctx: dict[str, Any]) -> Response:
        self._check_text(raw, payload, keep=True)
        return self._event(payload, ctx)

    def _check_text(self, raw: bytes | str, payload: dict[str, Any], *, keep: bool) -> None:
        if has_lone_surrogate(raw, payload):  # UTF-8 cannot carry it: Redis, logs and replies would fail
            if keep:
                self._keep_rejected(payload)
            raise Reject(400, "body contains a lone UTF-16 surrogate escape")

    def _event(self, payload: dict[str, Any], ctx: dict[str, Any]) -> Response:
        """The transport-neutral core for an authentic event: parse → admit → route → PUSH."""
        parsed = self._message_event(payload, ctx)
        if isinstance(parsed, Response):
            return parsed
        if parsed is None:
            return Response(200)
        bot_open_id = self.bot_open_id.get()
        try:
            inbound = to_inbound(*parsed, bot_open_id)
        except ContentError as exc:
            self._keep_rejected(payload)
            raise Reject(400, f"malformed message content ({exc})") from None
        return self._accept(inbound, bot_open_id, ctx)

    def _message_event(self, payload: dict[str, Any],
                       ctx: dict[str, Any]) -> tuple[Envelope, MessageEvent] | Response | None:
        """The `im.message.receive_v1` event; a side event's response (bot/side_events.py); None for events
        we ignore; 400 (and kept) when malformed."""
        header = payload.get("header")
        if isinstance(header, dict) and isinstance(header.get("event_id"), str):
            ctx["event_id"] = header["event_id"]
        if payload.get("schema") != "2.0":
            ctx["outcome"] = "ignored"
            log.info("ignored non-2.0 event", extra={**ctx, "reason": "schema"})
            return None
        envelope = self._validated(Envelope, payload, payload, "malformed schema 2.0 envelope")
        if envelope.header.event_type in SIDE_EVENTS:
            return self._side_event(envelope, payload, ctx)
        if envelope.header.event_type != MESSAGE_RECEIVE:
            ctx["outcome"] = "ignored"
            log.info("ignored event type", extra={**ctx, "reason": envelope.header.event_type})
            return None
        event = self._validated(MessageEvent, envelope.event, payload, "malformed im.message.receive_v1 event")
        return envelope, event

    def _side_event(self, envelope: Envelope, payload: dict[str, Any], ctx: dict[str, Any]) -> Response:
        try:
            body = self.side.handle(envelope, ctx)
        except (Bad, ValidationError) as exc:
            self._keep_rejected(payload)
            reason = first_error(exc) if isinstance(exc, ValidationError) else str(exc)
            raise Reject(400, f"malformed {envelope.header.event_type} event ({reason})") from None
        ctx.setdefault("outcome", "queued")
        log.info("event accepted", extra={**ctx, "reason": envelope.header.event_type})
        return Response(200, body) if body is not None else Response(200)

    def _validated(self, model: type[M], value: Any, payload: dict[str, Any], what: str) -> M:
        try:
            return model.model_validate(value)
        except ValidationError as exc:
            self._keep_rejected(payload)
            raise Reject(400, f"{what} ({first_error(exc)})") from None

    def _accept(self, inbound: Inbound, bot_open_id: str | None, ctx: dict[str, Any]) -> Response:
        ctx["message_id"] = inbound.message_id
        decision = admit(inbound, self.policy, bot_open_id)
        if not decision.admit:
            if decision.reason == IDENTITY_UNKNOWN:  # fail closed, but let Feishu deliver again later
                raise Reject(503, "bot identity not known yet, retry later")
            ctx["outcome"] = "ignored"
            why = decision.reason
            if decision.reason in UNADDRESSED and inbound.chat_type != "p2p" and not inbound.thread_id:
                related.keep(self.state, self.keys, inbound)  # background for later turns in this chat
                ctx["outcome"] = "related"  # a metric label: short, no spaces
            elif decision.reason in UNADDRESSED and inbound.thread_id:  # triage decides (opted-in chats only)
                triaged = self.app.overheard(self.settings, self.state, self.keys, inbound, self.clock.now())
                ctx["outcome"] = "triage" if triaged.startswith("triage") else "ignored"
                why = f"{decision.reason}; {triaged}"
            log.info("message not admitted", extra={**ctx, "reason": why})
            return Response(200)
        route = route_for(inbound, self.policy, self.settings.bot_profile)
        ctx["route_key"] = route.key
        reset = self.app.resets(inbound.message_type, inbound.text)
        pushed = self.inbox.push(route.key, dumps(inbound), message_id=inbound.message_id,
                                 content_key=inbound.content_key(), queue=route.queue,
                                 also=Pushed(reset_sid=new_session_id() if reset else ""))
        ctx["outcome"] = "duplicate" if pushed.duplicate else "queued"
        log.info("message accepted", extra={**ctx, "reason": ctx["outcome"]})
        return Response(200)

    def _keep_rejected(self, payload: dict[str, Any]) -> None:
        """Authenticated but unparseable: keep it (without the token) so it can be inspected and replayed."""
        kept = {k: v for k, v in payload.items() if k != "token"}
        if isinstance(kept.get("header"), dict):
            kept["header"] = {k: v for k, v in kept["header"].items() if k != "token"}
        pipe = self.state.pipeline()
        pipe.lpush(self.keys.rejected, _storable(kept))
        pipe.ltrim(self.keys.rejected, 0, REJECTED_KEPT - 1)
        pipe.expire(self.keys.rejected, 7 * 86400)
        pipe.execute()


def _storable(kept: dict[str, Any]) -> str:
    """JSON for the rejected list, whatever the payload holds (lone surrogates, deep nesting)."""
    try:
        text = json.dumps(kept, ensure_ascii=False)
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return json.dumps(kept)  # ASCII escapes carry lone surrogates intact
    except RecursionError:
        header = kept.get("header")
        event_id = header.get("event_id") if isinstance(header, dict) else None
        return json.dumps({"event_id": event_id if isinstance(event_id, str) else None,
                           "error": "too deeply nested to keep"})
