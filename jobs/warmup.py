"""Warm-up before forking: run the SDKs' and our own parsing code once, with no network, in the supervisor.

Much of a first call's cost is per process: the anthropic SDK builds its response-model machinery on
first use, lark-oapi its JSON codecs, pydantic its lazy validators. A work-horse forked from a process
that has done this once starts warm, which halves the CPU a turn costs (measured: ~94 → ~44 ms per
horse). The worker supervisor (jobs/worker.py) does it once before forking its RQ workers, so the
memory it touches is shared by every worker and horse instead of copied into each. Nothing here opens
a connection or starts a thread, so no socket or lock can be shared across a fork.
"""

from __future__ import annotations

import json
import logging

import anthropic
import httpx2
import lark_oapi as lark
from lark_oapi.api.im.v1 import (
    CreateMessageResponse,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
    ReplyMessageResponse,
)

from claude.prompt import assemble, format_batch, system_blocks
from core.inbound import Inbound
from runs import runtime
from runs.runtime import Runtime

log = logging.getLogger(__name__)

MESSAGE = {"id": "msg_warm", "type": "message", "role": "assistant", "model": "warm", "stop_reason": "end_turn",
           "stop_sequence": None, "content": [{"type": "text", "text": "ok"}],
           "usage": {"input_tokens": 1, "output_tokens": 1, "cache_creation_input_tokens": 0,
                     "cache_read_input_tokens": 0}}
SENT = {"code": 0, "msg": "success", "data": {
    "message_id": "om_warm", "root_id": "om_r", "parent_id": "om_p", "thread_id": "omt_t", "msg_type": "text",
    "create_time": "1", "update_time": "1", "deleted": False, "updated": False, "chat_id": "oc_warm",
    "sender": {"id": "cli_warm", "id_type": "app_id", "sender_type": "app", "tenant_key": "t"},
    "body": {"content": "{\"text\":\"ok\"}"}, "mentions": []}}


def warm(rt: Runtime) -> None:
    """Never fails the worker: a warm-up that breaks only costs the speed-up."""
    try:
        _anthropic(rt)
        _lark()
        _ours()
    except Exception as exc:
        log.warning("warm-up skipped", extra={"error": f"{exc.__class__.__name__}: {exc}"})


def _anthropic(rt: Runtime) -> None:
    """The real SDK call path, answered by an in-memory transport."""
    transport = httpx2.MockTransport(lambda request: httpx2.Response(200, json=MESSAGE))
    client = anthropic.Anthropic(api_key="warm-up", base_url="http://warm-up.invalid",
                                 http_client=httpx2.Client(transport=transport), max_retries=0)
    client.messages.create(model=rt.settings.anthropic_model, max_tokens=1, system=system_blocks(),  # type: ignore[arg-type]
                           messages=[{"role": "user", "content": "warm"}])
    client.close()


def _lark() -> None:
    body = (ReplyMessageRequestBody.builder().msg_type("text").content(json.dumps({"text": "warm"}))
            .reply_in_thread(False).uuid("warm").build())
    req = ReplyMessageRequest.builder().message_id("om_warm").request_body(body).build()
    lark.JSON.marshal(req.body)
    for response_type in (ReplyMessageResponse, CreateMessageResponse):
        lark.JSON.unmarshal(json.dumps(SENT), response_type)


def _ours() -> None:
    inbound = Inbound.model_validate_json(json.dumps({
        "event_id": "e", "message_id": "om_warm", "chat_id": "oc_warm", "chat_type": "p2p", "sender_open_id": "ou_w",
        "sender_type": "user", "message_type": "text", "text": "warm", "content": "{\"text\":\"warm\"}"}))
    assemble([], format_batch([inbound]), 24000)


_prepared = False


def prepare() -> Runtime:
    """Build the SDK clients and warm their code paths now, without any network call; every process
    forked afterwards saves the cost (see `warm`). Once per process tree: a forked child of a process that
    prepared returns at once."""
    global _prepared
    rt = runtime.current()
    if _prepared:
        return rt
    _prepared = True
    _ = rt.app, rt.llm, rt.feishu, rt.outbox, rt.policy  # the App: every feature, built once before the forks
    warm(rt)
    return rt
