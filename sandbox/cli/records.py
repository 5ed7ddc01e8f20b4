"""`python -m sandbox records|edit-record|add-record`: the sandbox table as a person sees and edits it."""

from __future__ import annotations

import argparse
from typing import Any

import requests

from core.settings import Settings
from sandbox.bitable.cells import CHECKBOX, DATE, GROUP, MULTI, NUMBER, URL, USER
from sandbox.cli.wire import ControlError, Emulator, deliver, emulator_settings, table_ids
from sandbox.feishu.events import bitable_record_changed_event


def cell_text(cell: Any) -> str:
    """A cell in the read format as one line: text segments joined, people and chats by name (id), links."""
    if isinstance(cell, list):
        if all(isinstance(c, dict) and "type" in c for c in cell):  # text segments
            return "".join(str(c.get("text", "")) for c in cell)
        return ", ".join(_entity(c) for c in cell)
    if isinstance(cell, dict) and "link" in cell:
        text, link = cell.get("text") or "", cell["link"]
        return link if text in ("", link) else f"{text} <{link}>"
    if isinstance(cell, bool):
        return "是" if cell else "否"
    return "" if cell is None else str(cell)


def _entity(item: Any) -> str:
    if isinstance(item, dict) and "id" in item:
        return f"{item['name']} ({item['id']})" if item.get("name") else str(item["id"])
    return str(item)


def write_value(kind: int, raw: str) -> Any:
    """A typed-in value → the write format of a field type (empty clears the cell)."""
    if raw == "":
        return None
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if kind in (USER, GROUP):
        return [{"id": p} for p in parts]
    if kind == URL:
        return {"text": raw, "link": raw}
    if kind == MULTI:
        return parts
    if kind == NUMBER:
        number = float(raw)
        return int(number) if number.is_integer() else number
    if kind == DATE:
        return int(raw)
    if kind == CHECKBOX:
        return raw.lower() in ("1", "true", "yes", "是", "y")
    return raw


def parse_assignments(fields: list[dict[str, Any]], pairs: list[str]) -> dict[str, Any]:
    kinds = {f["field_name"]: int(f["type"]) for f in fields}
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep:
            raise ValueError(f"expected 字段=值, got {pair!r}")
        if name not in kinds:
            raise ValueError(f"no field {name!r}; fields: {', '.join(kinds)}")
        out[name] = write_value(kinds[name], raw)
    return out


def print_record(record: dict[str, Any]) -> None:
    print(record["record_id"])
    for name, cell in record["fields"].items():
        print(f"    {name}: {cell_text(cell)}")


def records(args: argparse.Namespace) -> int:
    settings = emulator_settings("records")
    if settings is None:
        return 2
    app, table = table_ids(settings)
    try:
        found = Emulator(settings.feishu_domain).get("bitable/records", app_token=app, table_id=table)
    except (requests.RequestException, ControlError) as exc:
        print(f"cannot read table {app}/{table}: {exc}")
        return 1
    print(f"table {app}/{table}: {len(found)} record(s)")
    for record in found:
        print_record(record)
    return 0


def _write(args: argparse.Namespace, record_id: str | None) -> int:
    settings = emulator_settings(args.command)
    if settings is None:
        return 2
    emu, (app, table) = Emulator(settings.feishu_domain), table_ids(settings)
    where = {"app_token": app, "table_id": table}
    try:
        fields = parse_assignments(emu.get("bitable/fields", **where), args.fields)
        before = [] if record_id is None else emu.get("bitable/change_values", **where, record_id=record_id)
        body = {**where, "fields": fields, "operator_open_id": args.user}
        if record_id is None:
            record = emu.post("bitable/records", body)
        else:
            record = emu.post("bitable/records/edit", {**body, "record_id": record_id})
        after = emu.get("bitable/change_values", **where, record_id=record["record_id"])
        subscribed = {"file_token": app, "file_type": "bitable"} in emu.get("subscriptions")
    except (requests.RequestException, ControlError, ValueError) as exc:
        print(f"cannot write to table {app}/{table}: {exc}")
        return 1
    print_record(record)
    if not (subscribed or args.force):
        print(f"base {app} is not subscribed (the service subscribes when items are on), so Feishu sends no "
              "event; --force sends it anyway")
        return 0
    action = "record_added" if record_id is None else "record_edited"
    return _notify(settings, args, app, table, record["record_id"], action, before, after)


def _notify(settings: Settings, args: argparse.Namespace, app: str, table: str, record_id: str, action: str,
            before: list[dict[str, str]], after: list[dict[str, str]]) -> int:
    event = bitable_record_changed_event(
        app, table, record_id, action, args.user, after=after, before=before,
        token=settings.secret("feishu_verification_token"), app_id=settings.app_id,
    )
    status = deliver(settings, event, args.url, f"drive.file.bitable_record_changed_v1 {action} {record_id}")
    return 0 if status == 200 else 1


def edit_record(args: argparse.Namespace) -> int:
    return _write(args, args.record_id)


def add_record(args: argparse.Namespace) -> int:
    return _write(args, None)


def add_commands(sub: Any) -> None:
    """Register records, edit-record and add-record on the `python -m sandbox` parser."""
    help_values = "字段=值 …: text as typed; people and chats as ou_…/oc_… ids (comma-separated); links as a URL"
    sub.add_parser("records", help="list the sandbox table's records, cells as text").set_defaults(func=records)
    p = sub.add_parser("edit-record", help="edit a record as a person would, then push the record-changed event")
    p.add_argument("record_id", help="rec…")
    p.set_defaults(func=edit_record)
    p = sub.add_parser("add-record", help="add a record as a person would, then push the record-changed event")
    p.set_defaults(func=add_record)
    for name in ("edit-record", "add-record"):
        p = sub.choices[name]
        p.add_argument("fields", nargs="+", metavar="字段=值", help=help_values)
        p.add_argument("--as", dest="user", default="ou_sandbox_user", help="the person's open_id")
        p.add_argument("--url", default=None, help="webhook URL (default http://127.0.0.1:$PORT/feishu/events)")
        p.add_argument("--force", action="store_true", help="send the event even if the base is not subscribed")
