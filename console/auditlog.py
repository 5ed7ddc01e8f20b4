"""The audit page: who did what to which object, when, and how it ended — newest first, a page at a time."""

from __future__ import annotations

from flask import request

from console import audit
from console.web import bp, page, rt


@bp.get("/audit")
def audit_page() -> str:
    entries, more = audit.page(rt().state, rt().keys, request.args.get("before", "+"), 50)
    return page("audit.html", entries=entries, more=more)
