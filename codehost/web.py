"""The webhooks' Flask edge: request → `ingress.Request` → `Door` → JSON answer. Nothing else (style.md §1).

An endpoint whose secret is unset is off: 404, as if it did not exist. A body over CODEHOST_MAX_BODY_BYTES is a 413
before it is read (the web's error handlers answer JSON for both).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import cast

from flask import Blueprint, Response, abort, request

from codehost.ingress import ROUTE_KIND, Answer, Door, Request
from codehost.settings import CodehostSettings
from core.settings import load_feature_settings
from runs.runtime import Runtime


def blueprint(rt: Runtime) -> Blueprint:
    """The blueprint the web registers for this feature (Feature.web), on the web's runtime. Its settings are read
    here, when the web is built (as the web reads its own)."""
    s = load_feature_settings(CodehostSettings)
    door = Door(rt.inbox, rt.state, rt.keys, rt.policy.queue_of(ROUTE_KIND), s)
    bp = Blueprint("codehost", __name__)

    def endpoint(secret: str, handle: Callable[[Request], Answer]) -> tuple[Response, int]:
        if not s.secret(secret):
            abort(404)
        request.max_content_length = s.codehost_max_body_bytes
        body = request.get_data(cache=False)  # 413 past the cap
        answer = handle(Request(cast(Mapping[str, str], request.headers), body, request.mimetype))
        return Response(json.dumps(answer.body), mimetype="application/json"), answer.status

    bp.add_url_rule("/hooks/github", "github", lambda: endpoint("github_webhook_secret", door.github),
                    methods=["POST"])
    bp.add_url_rule("/hooks/gitlab", "gitlab", lambda: endpoint("gitlab_webhook_token", door.gitlab),
                    methods=["POST"])
    return bp
