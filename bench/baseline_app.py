"""The benchmark baseline: a bare lark-oapi webhook that decrypts, verifies, parses and returns 200."""

from __future__ import annotations

import os

import lark_oapi as lark
from flask import Flask, Response
from lark_oapi.adapter.flask import parse_req, parse_resp


def _ignore(data: lark.im.v1.P2ImMessageReceiveV1) -> None:
    """The baseline does no work with the event: it measures the SDK's own request path only."""


def create_app(encrypt_key: str | None = None, verification_token: str | None = None) -> Flask:
    handler = (
        lark.EventDispatcherHandler.builder(
            encrypt_key if encrypt_key is not None else os.environ["FEISHU_ENCRYPT_KEY"],
            verification_token if verification_token is not None else os.environ["FEISHU_VERIFICATION_TOKEN"],
        )
        .register_p2_im_message_receive_v1(_ignore)
        .build()
    )
    app = Flask(__name__)

    @app.post("/feishu/events")
    def events() -> Response:
        return parse_resp(handler.do(parse_req()))

    return app


app = create_app()  # gunicorn target `bench.baseline_app:app`; only the benchmark imports this module
