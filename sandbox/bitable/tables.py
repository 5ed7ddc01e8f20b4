"""Bitable (多维表格) tables for the emulator: records, search, idempotent and per-table serialised writes (§5)."""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sandbox.bitable.cells import (
    DATE,
    GROUP,
    MULTI,
    NUMBER,
    OPERATORS,
    SINGLE,
    TEXT,
    UI_TYPES,
    URL,
    USER,
    Person,
    bitable_error,
    bounded_size,
    matches,
    new_bitable_id,
    page_offset,
    page_token,
    read_cell,
    texts_of,
    to_cell,
)

WRITE_TIME_SECONDS = 0.05
MAX_CONDITIONS, MAX_VALUES = 50, 10  # per search filter, per condition (the record filter guide)

DEFAULT_FIELDS: tuple[tuple[str, int], ...] = (
    ("标题", TEXT), ("描述", TEXT), ("提出人", USER), ("负责人", USER), ("状态", SINGLE), ("来源群", GROUP),
    ("话题链接", URL), ("事项ID", TEXT), ("首答链接", URL), ("首答状态", SINGLE), ("首答版本", NUMBER),
)

DEFAULT_STATUSES = ("待处理", "处理中", "待确认", "已解决", "已关闭")


def _field(name: str, kind: int, primary: bool) -> dict[str, Any]:
    props: dict[int, dict[str, Any]] = {
        SINGLE: {"options": []}, MULTI: {"options": []}, NUMBER: {"formatter": "0"},
        USER: {"multiple": True}, GROUP: {"multiple": True},
    }
    prop = props.get(kind)
    return {"field_id": new_bitable_id("fld", 10), "field_name": name, "type": kind, "ui_type": UI_TYPES[kind],
            "property": prop, "is_primary": primary}


@dataclass
class Table:
    """One data table: its fields in order, its records by id, and the state of API writes."""

    app_token: str
    table_id: str
    fields: list[dict[str, Any]]
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    writes: list[dict[str, Any]] = field(default_factory=list)
    client_tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    busy: bool = False

    def by_name(self, name: Any) -> dict[str, Any]:
        for f in self.fields:
            if f["field_name"] == name:
                return f
        raise bitable_error(1254045, f"FieldNameNotFound: {name!r}")

    def url(self, record_id: str) -> str:
        return f"https://feishu.cn/base/{self.app_token}?table={self.table_id}&record={record_id}"


class BitableStore:
    """Bitable apps → tables → records behind the emulator's lock; writes to one table never overlap."""

    def __init__(self, lock: threading.RLock, person: Person, chat_name: Callable[[str], str],
                 sleep: Callable[[float], None], clock: Callable[[], float] = time.time) -> None:
        self.lock, self.person, self.chat_name, self.sleep, self.clock = lock, person, chat_name, sleep, clock
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.apps: dict[str, dict[str, Table]] = {}
            self.write_time = WRITE_TIME_SECONDS

    # -- tables and their contents (Python API) ------------------------------------------------------

    def add_table(self, app_token: str, table_id: str, fields: list[tuple[str, int]] | None = None) -> Table:
        specs = list(DEFAULT_FIELDS if fields is None else fields)
        for _, kind in specs:
            if kind not in UI_TYPES:
                raise ValueError(f"unsupported field type {kind}; expected one of {sorted(UI_TYPES)}")
        with self.lock:
            tables = self.apps.setdefault(app_token, {})
            if table_id not in tables:
                made = [_field(name, kind, i == 0) for i, (name, kind) in enumerate(specs)]
                if fields is None:  # a team's items table comes with its status options (more appear on write)
                    for f in made:
                        if f["field_name"] == "状态":
                            f["property"]["options"] = [{"name": n, "id": new_bitable_id("opt", 10), "color": c}
                                                        for c, n in enumerate(DEFAULT_STATUSES)]
                tables[table_id] = Table(app_token, table_id, made)
            return tables[table_id]

    def table(self, app_token: str, table_id: str) -> Table:
        with self.lock:
            if app_token not in self.apps:
                raise bitable_error(1254040, f"BaseTokenNotFound: {app_token}")
            if table_id not in self.apps[app_token]:
                raise bitable_error(1254041, f"TableIdNotFound: {table_id}")
            return self.apps[app_token][table_id]

    def cells(self, table: Table, fields: Any) -> dict[str, Any]:
        """Validate written fields → {name: stored cell or None}; unknown names and bad shapes raise."""
        if not isinstance(fields, dict):
            raise bitable_error(1254001, "WrongRequestBody: fields must be an object")
        converted = {}
        for name, value in fields.items():
            spec = table.by_name(name)
            converted[name] = to_cell(spec["type"], value)
            if spec["type"] in (SINGLE, MULTI):
                self._add_options(spec, converted[name])
        return converted

    @staticmethod
    def _add_options(spec: dict[str, Any], cell: Any) -> None:
        """An unknown option in a select cell is created on write, as Feishu does."""
        options = spec["property"]["options"]
        for name in [cell] if isinstance(cell, str) else cell or []:
            if all(o["name"] != name for o in options):
                options.append({"name": name, "id": new_bitable_id("opt", 10), "color": len(options) % 55})

    def read(self, table: Table, record: dict[str, Any], names: list[str] | None = None) -> dict[str, Any]:
        kinds = {f["field_name"]: f["type"] for f in table.fields}
        return {name: read_cell(kinds[name], cell, self.person, self.chat_name)
                for name, cell in record["cells"].items() if names is None or name in names}

    def apply(self, table: Table, record_id: str | None, cells: dict[str, Any], operator: str) -> dict[str, Any]:
        """Create (record_id None) or partially update a record; the caller holds the lock."""
        now = int(self.clock() * 1000)
        if record_id is None:
            record_id = new_bitable_id("rec")
            table.records[record_id] = {"record_id": record_id, "cells": {}, "created_time": now,
                                        "created_by": operator}
        record = table.records[record_id]
        for name, cell in cells.items():
            if cell is None:
                record["cells"].pop(name, None)
            else:
                record["cells"][name] = cell
        record.update(last_modified_time=now, last_modified_by=operator)
        return record

    def view(self, table: Table, record: dict[str, Any], *, automatic: bool = False,
             names: list[str] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"record_id": record["record_id"], "fields": self.read(table, record, names)}
        if automatic:
            out.update(created_time=record["created_time"], last_modified_time=record["last_modified_time"],
                       created_by=self.person(record["created_by"]),
                       last_modified_by=self.person(record["last_modified_by"]))
        return out

    # -- Open API handlers (return `data`, or raise FeishuError) -------------------------------------

    def list_fields(self, app_token: str, table_id: str, query: dict[str, str]) -> dict[str, Any]:
        size = bounded_size(query.get("page_size"), 20, 100)
        offset = page_offset(query.get("page_token"))
        with self.lock:
            fields = copy.deepcopy(self.table(app_token, table_id).fields)
        return _page(fields, offset, size)

    def search(self, app_token: str, table_id: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        size = bounded_size(query.get("page_size"), 20, 500)
        offset = page_offset(query.get("page_token"))
        body = body if isinstance(body, dict) else {}
        with self.lock:
            table = self.table(app_token, table_id)
            names = body.get("field_names")
            for name in names or []:
                table.by_name(name)
            self._check_filter(table, body.get("filter"))  # refused even when the table is empty
            found = [r for r in table.records.values() if self._passes(table, r, body.get("filter"))]
            found = self._sorted(table, found, body.get("sort") or [])
            items = [self.view(table, r, automatic=bool(body.get("automatic_fields")), names=names)
                     for r in found]
        return _page(items, offset, size)

    def _check_filter(self, table: Table, flt: Any, depth: int = 0) -> None:
        """The filter rules of the record filter guide: a conjunction is required, children nest one level,
        at most 50 conditions of at most 10 values, each with a `value` list (`[]` when empty), and
        `is`/`isNot` take one value (a date field takes ["ExactDate", ms] and the like)."""
        if not flt:
            return
        if not isinstance(flt, dict) or flt.get("conjunction") not in ("and", "or"):
            raise bitable_error(1254018, "InvalidFilter: conjunction must be and|or")
        if depth > 1:
            raise bitable_error(1254018, "InvalidFilter: children nest one level only")
        conditions = flt.get("conditions") or []
        if len(conditions) > MAX_CONDITIONS:
            raise bitable_error(99992402, f"field validation failed: conditions hold at most {MAX_CONDITIONS}")
        for cond in conditions:
            self._check_condition(table, cond)
        for child in flt.get("children") or []:
            self._check_filter(table, child, depth + 1)

    @staticmethod
    def _check_condition(table: Table, cond: Any) -> None:
        spec = table.by_name(cond.get("field_name") if isinstance(cond, dict) else None)
        operator, values = cond.get("operator"), cond.get("value")
        if operator not in OPERATORS:
            raise bitable_error(1254018, f"InvalidFilter: operator {operator!r}")
        if not isinstance(values, list):
            raise bitable_error(1254018, "InvalidFilter: value is missing (an empty one is [])")
        if len(values) > MAX_VALUES:
            raise bitable_error(99992402, f"field validation failed: value holds at most {MAX_VALUES}")
        if operator in ("is", "isNot") and spec["type"] != DATE and len(values) > 1:
            raise bitable_error(1254018, f"InvalidFilter: {operator} takes one value")

    def _passes(self, table: Table, record: dict[str, Any], flt: Any) -> bool:
        if not flt:
            return True
        results = []
        for cond in flt.get("conditions") or []:
            spec = table.by_name(cond["field_name"])
            cell = record["cells"].get(spec["field_name"])
            results.append(matches(spec["type"], cell, cond["operator"], [str(v) for v in cond.get("value") or []]))
        results += [self._passes(table, record, child) for child in flt.get("children") or []]
        if not results:
            return True
        return all(results) if flt.get("conjunction", "and") == "and" else any(results)

    def _sorted(self, table: Table, records: list[dict[str, Any]], sort: Any) -> list[dict[str, Any]]:
        for rule in reversed(sort if isinstance(sort, list) else []):
            spec = table.by_name(rule.get("field_name"))
            desc = bool(rule.get("desc"))
            present = [r for r in records if spec["field_name"] in r["cells"]]
            absent = [r for r in records if spec["field_name"] not in r["cells"]]

            def key(r: dict[str, Any], kind: int = spec["type"], name: str = spec["field_name"]) -> Any:
                cell = r["cells"][name]
                return cell if kind in (NUMBER, DATE) else " ".join(texts_of(kind, cell))

            records = sorted(present, key=key, reverse=desc) + absent  # empty cells last, either way
        return records

    def batch_get(self, app_token: str, table_id: str, body: Any) -> dict[str, Any]:
        ids = body.get("record_ids") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not 1 <= len(ids) <= 100:
            raise bitable_error(99992402, "field validation failed: record_ids must hold 1 to 100 ids")
        with self.lock:
            table = self.table(app_token, table_id)
            records, absent = [], []
            for record_id in ids:
                record = table.records.get(record_id)
                if record is None:
                    absent.append(record_id)
                    continue
                item = self.view(table, record, automatic=bool(body.get("automatic_fields")))
                item["record_url"] = table.url(record_id)
                if body.get("with_shared_url"):
                    item["shared_url"] = table.url(record_id)
                records.append(item)
        return {"records": records, "absent_record_ids": absent, "forbidden_record_ids": []}

    def create(self, app_token: str, table_id: str, query: dict[str, str], body: Any) -> dict[str, Any]:
        token = query.get("client_token")
        if token is not None and not _is_uuid4(token):
            raise bitable_error(1254037)
        return self._write(app_token, table_id, None, body, token)

    def update(self, app_token: str, table_id: str, record_id: str, body: Any) -> dict[str, Any]:
        return self._write(app_token, table_id, record_id, body, None)

    def _write(self, app_token: str, table_id: str, record_id: str | None, body: Any,
               token: str | None) -> dict[str, Any]:
        fields = body.get("fields") if isinstance(body, dict) else None
        with self.lock:
            table = self.table(app_token, table_id)
            if token is not None and token in table.client_tokens:
                return copy.deepcopy(table.client_tokens[token])  # the record created the first time
            if record_id is not None and record_id not in table.records:
                raise bitable_error(1254043, f"RecordIdNotFound: {record_id}")
            cells = self.cells(table, fields)
            if table.busy:
                raise bitable_error(1254291)  # another write to this table is still in progress
            table.busy = True
            record = self.apply(table, record_id, cells, "ou_app")
            answer = {"record": {"record_id": record["record_id"], "id": record["record_id"],
                                 "fields": copy.deepcopy(fields)}}
            if token is not None:
                table.client_tokens[token] = copy.deepcopy(answer)
            table.writes.append({"op": "create" if record_id is None else "update", "record_id": record["record_id"],
                                 "fields": copy.deepcopy(fields), "client_token": token, "time": self.clock()})
            hold = self.write_time
        try:
            self.sleep(hold)  # the table stays busy while the write is "in progress"
        finally:
            with self.lock:
                table.busy = False
        return answer


def _page(items: list[Any], offset: int, size: int) -> dict[str, Any]:
    more = offset + size < len(items)
    return {"items": items[offset:offset + size], "has_more": more,
            "page_token": page_token(offset + size) if more else "", "total": len(items)}


def _is_uuid4(token: str) -> bool:
    try:
        parsed = uuid.UUID(token)
    except ValueError:
        return False
    return parsed.version == 4 and str(parsed) == token.lower()
