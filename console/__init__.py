"""The operator console (`/console/`): enters a signed-in operator's browser (Feishu sign-in for CONSOLE_ADMINS, or
ADMIN_TOKEN); leaves server-rendered pages over Redis state (overview, routes, routing simulator, items, timers,
dead letters, memory, audit, rq-dashboard's queues) and the admin API's actions, each written to the audit log."""

from __future__ import annotations

from flask import Flask

from runs.runtime import Runtime


def init_app(app: Flask, runtime: Runtime) -> None:
    from console import (  # noqa: F401  (their views register on the blueprint)
        auditlog,
        deadletters,
        features,
        items,
        login,
        memory,
        overview,
        routes,
        rqdash,
        simulator,
        timers,
    )
    from console.web import bp, headers

    app.extensions["admin_runtime"] = runtime
    app.register_blueprint(bp)
    app.after_request(headers)
    rqdash.init_app(app)
