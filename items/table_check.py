"""The items table at start-up (and hourly, from the sweeper): field names checked, record events subscribed.

A configured field name the table lacks pauses work (component `bitable`) with an error naming the
field and its env variable: `/readyz` shows it, the log has it at ERROR, the admin chat is told, and the
sweeper's probe resumes work once the table or the config is fixed. Messages are kept meanwhile.
"""

from __future__ import annotations

import json
import logging
import time

from lark_oapi.api.drive.v1 import SubscribeFileRequest

from bitable import keys as item_keys
from bitable.errors import SchemaError
from runs.alerts import alert
from runs.runtime import Runtime

log = logging.getLogger(__name__)
COMPONENT = "bitable"
CHECK_EVERY_S = 3600.0  # a table that passed is checked again hourly (the sweeper's side work, items/feature.py)
RETRY_S = 30.0  # a table that cannot be checked (Open API down, wrong ids) is tried again this often
SUBSCRIBE_FIX = ("Record events are off: records that name a topic link only from the topic (/登记, /item link). "
                 "Only the base's owner or a manager may subscribe its events: have one of them add the app as a "
                 "collaborator with manage rights (or grant drive:drive / bitable:app and publish), then wait for "
                 "the hourly check or restart the sweeper.")


def probe(rt: Runtime) -> None:
    """Raises while the configured field names do not match the table (the sweeper's pause probe)."""
    assert rt.bitable is not None
    rt.bitable.check_now()


def run(rt: Runtime) -> bool:
    """Check the schema and subscribe to the table's record events; the outcome goes to /readyz."""
    if rt.bitable is None:
        return True
    status: dict[str, str] = {"checked_at": str(round(time.time(), 3))}
    ok = True
    try:
        probe(rt)
        status["schema"] = "ok"
    except SchemaError as exc:
        status["schema"] = str(exc)
        ok = False
        _pause(rt, exc)
    except Exception as exc:  # Open API down: try again on the next check
        status["schema"] = f"not checked: {exc.__class__.__name__}: {exc}"
        ok = False
        log.warning("bitable schema not checked", extra={"error": status["schema"]})
    status["subscription"] = _subscribe(rt)
    if status["subscription"] != "ok":
        status["subscription_fix"] = SUBSCRIBE_FIX
    rt.state.delete(item_keys.bitable_status(rt.keys))
    rt.state.hset(item_keys.bitable_status(rt.keys), mapping=dict(status))  # type: ignore[arg-type]
    return ok  # a refused subscription is tried again with the hourly check; items work without it


def _pause(rt: Runtime, exc: SchemaError) -> None:
    reason = json.dumps({"reason": str(exc), "code": "schema", "since": round(time.time(), 3)}, ensure_ascii=False)
    log.error("bitable field names do not match the table: work paused", extra={"error": str(exc)})
    if rt.state.hsetnx(rt.keys.paused, COMPONENT, reason):
        alert(rt, f"⚠️ 暂停处理：多维表格字段配置不对（{exc}）。消息已保留，修复后会自动继续。")


def _subscribe(rt: Runtime) -> str:
    """Ask Feishu to push `drive.file.bitable_record_changed_v1` for the table's base (idempotent)."""
    s = rt.settings
    req = SubscribeFileRequest.builder().file_token(s.bitable_app_token or "").file_type("bitable").build()
    try:
        rt.feishu._call(rt.feishu.client.drive.v1.file.subscribe, req, "record_events")
    except Exception as exc:
        log.error("bitable record events not subscribed", extra={"error": f"{exc.__class__.__name__}: {exc}"})
        return f"failed: {exc}"
    return "ok"
