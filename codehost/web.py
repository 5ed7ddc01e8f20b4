"""The webhooks' web edge: request → `ingress.Request` → `Door` → JSON answer. Nothing else (style.md §1).

An endpoint whose secret is unset is off: 404, as if it did not exist (no lane either). Each configured endpoint is a
blueprint route and a lane (bot/lanes.py) with the same answers: the lane takes the usual POST, the route what the lane
does not take on — a body over CODEHOST_MAX_BODY_BYTES is a 413 before it is read (the web's error handlers answer
JSON), a chunked body is read by Flask.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import cast

from flask import Blueprint, Response, abort, request

from codehost.ingress import ROUTE_KIND, Answer, Door, Request
from codehost.settings import CodehostSettings, settings
from runs.runtime import Runtime
from turn.registry import Lane, Web

Handle = Callable[[Request], Answer]


def web(rt: Runtime) -> Web:
    """What the web registers for this feature (Feature.web), on the web's runtime. Its settings are read here, when
    the web is built (as the web reads its own)."""
    s = settings(rt.settings)
    door = Door(rt.inbox, rt.state, rt.keys, rt.policy.queue_of(ROUTE_KIND), s)
    endpoints = {"/hooks/github": ("github_webhook_secret", door.github),
                 "/hooks/gitlab": ("gitlab_webhook_token", door.gitlab)}
    bp = Blueprint("codehost", __name__)
    lanes: list[Lane] = []
    for path, (secret, handle) in endpoints.items():
        bp.add_url_rule(path, path.rpartition("/")[2], _route(s, secret, handle), methods=["POST"])
        if s.secret(secret):
            lanes.append(Lane(path, _neutral(handle), s.codehost_max_body_bytes))
    return Web(bp, tuple(lanes))


def answer(handle: Handle, headers: Mapping[str, str], body: bytes, mimetype: str) -> tuple[int, bytes]:
    result = handle(Request(headers, body, mimetype))
    return result.status, json.dumps(result.body).encode()


def _neutral(handle: Handle) -> Callable[[Mapping[str, str], bytes, str], tuple[int, bytes]]:
    return lambda headers, body, mimetype: answer(handle, headers, body, mimetype)


def _route(s: CodehostSettings, secret: str, handle: Handle) -> Callable[[], Response]:
    def endpoint() -> Response:
        if not s.secret(secret):
            abort(404)
        request.max_content_length = s.codehost_max_body_bytes
        body = request.get_data(cache=False)  # 413 past the cap
        status, text = answer(handle, cast(Mapping[str, str], request.headers), body, request.mimetype)
        return Response(text, status=status, mimetype="application/json")

    return endpoint
