"""The emulator's item side (issue 7): Bitable UI writes, users, chat members, card versions, their Open APIs."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from sandbox.feishu.rules import FeishuError

if TYPE_CHECKING:
    from sandbox.bitable.tables import BitableStore
    from sandbox.feishu.store import FeishuStore

T = TypeVar("T")


class ItemsApi:
    """Mixed into FeishuEmulator, whose __init__ makes `store` and `bitable`."""

    if TYPE_CHECKING:
        store: FeishuStore
        bitable: BitableStore

    def set_members(self, chat_id: str, open_ids: list[str]) -> None:
        """Replace a chat's people (auto-adding the chat); the bot is never listed, as in Feishu."""
        self.store.set_members(chat_id, open_ids)

    def add_user(self, open_id: str, name: str, *, en_name: str = "", email: str = "") -> dict[str, str]:
        """A directory entry: names in Bitable user cells, chat member lists and with_sender_name."""
        return self.store.add_user(open_id, name, en_name, email)

    # -- Bitable (acting as the Bitable UI: not API calls, never refused as write conflicts) -------------

    def add_table(
        self, app_token: str, table_id: str, fields: list[tuple[str, int]] | None = None
    ) -> list[dict[str, Any]]:
        """Create a table (and its app) on demand; fields=None → bitable.DEFAULT_FIELDS. Returns its fields."""
        table = self.bitable.add_table(app_token, table_id, fields)
        with self.store.lock:
            return copy.deepcopy(table.fields)

    def table_fields(self, app_token: str, table_id: str) -> list[dict[str, Any]]:
        """A table's fields as GET fields lists them (field_id, field_name, type, …), in order."""
        with self.store.lock:
            return copy.deepcopy(_ui(lambda: self.bitable.table(app_token, table_id)).fields)

    def records(self, app_token: str, table_id: str) -> list[dict[str, Any]]:
        """Every record as {record_id, fields} with cells in the read format, in creation order."""
        with self.store.lock:
            table = _ui(lambda: self.bitable.table(app_token, table_id))
            return [self.bitable.view(table, r) for r in table.records.values()]

    def add_record(self, app_token: str, table_id: str, fields: dict[str, Any], *,
                   operator_open_id: str = "ou_user") -> dict[str, Any]:
        """A person adds a row in the UI (fields in the write format); returns {record_id, fields} as read."""
        return self._ui_write(app_token, table_id, None, fields, operator_open_id)

    def edit_record(self, app_token: str, table_id: str, record_id: str, fields: dict[str, Any], *,
                    operator_open_id: str = "ou_user") -> dict[str, Any]:
        """A person edits cells in the UI (partial, write format; None clears a cell); returns the record."""
        return self._ui_write(app_token, table_id, record_id, fields, operator_open_id)

    def _ui_write(self, app_token: str, table_id: str, record_id: str | None, fields: dict[str, Any],
                  operator: str) -> dict[str, Any]:
        with self.store.lock:
            table = _ui(lambda: self.bitable.table(app_token, table_id))
            if record_id is not None and record_id not in table.records:
                raise ValueError(f"1254043: RecordIdNotFound: {record_id}")
            cells = _ui(lambda: self.bitable.cells(table, fields))
            return self.bitable.view(table, self.bitable.apply(table, record_id, cells, operator))

    def record_change_values(self, app_token: str, table_id: str, record_id: str) -> list[dict[str, str]]:
        """A record's cells as drive.file.bitable_record_changed_v1 after_value lists them (field_id, JSON)."""
        with self.store.lock:
            table = _ui(lambda: self.bitable.table(app_token, table_id))
            values = self.bitable.read(table, table.records[record_id])
            ids = {f["field_name"]: f["field_id"] for f in table.fields}
            return [{"field_id": ids[name], "field_value": json.dumps(value, ensure_ascii=False)}
                    for name, value in values.items()]

    def bitable_writes(self, app_token: str, table_id: str) -> list[dict[str, Any]]:
        """Accepted API writes, in order: {op: create|update, record_id, fields (as sent), client_token, time}."""
        with self.store.lock:
            return copy.deepcopy(_ui(lambda: self.bitable.table(app_token, table_id)).writes)

    def set_bitable_write_time(self, seconds: float) -> None:
        """How long each accepted write keeps its table busy (a concurrent write meanwhile gets 1254291)."""
        with self.store.lock:
            self.bitable.write_time = max(float(seconds), 0.0)

    def subscriptions(self) -> list[dict[str, str]]:
        """drive/v1 file subscriptions: [{file_token, file_type}] in order (repeats recorded once)."""
        with self.store.lock:
            return copy.deepcopy(self.store.subscriptions)

    def card_versions(self, message_id: str) -> list[Any]:
        """A bot card's JSON as sent, then after each accepted PATCH ([] for other messages)."""
        return self.store.card_versions(message_id)

    # -- Open API handlers ----------------------------------------------------------------------------

    def _patch(self, record: dict[str, Any]) -> dict[str, Any]:
        self.store.patch(record["params"]["message_id"], record["json"], record["size"])
        return ok({})

    def _members(self, record: dict[str, Any]) -> dict[str, Any]:
        return ok(self.store.chat_members(record["params"]["chat_id"], record["query"]))

    def _subscribe(self, record: dict[str, Any]) -> dict[str, Any]:
        self.store.subscribe(record["params"]["file_token"], record["query"].get("file_type"))
        return ok({})

    def _bitable_fields(self, record: dict[str, Any]) -> dict[str, Any]:
        p = record["params"]
        return ok(self.bitable.list_fields(p["app_token"], p["table_id"], record["query"]))

    def _bitable_search(self, record: dict[str, Any]) -> dict[str, Any]:
        p = record["params"]
        return ok(self.bitable.search(p["app_token"], p["table_id"], record["query"], record["json"]))

    def _bitable_batch_get(self, record: dict[str, Any]) -> dict[str, Any]:
        p = record["params"]
        return ok(self.bitable.batch_get(p["app_token"], p["table_id"], record["json"]))

    def _bitable_create(self, record: dict[str, Any]) -> dict[str, Any]:
        p = record["params"]
        return ok(self.bitable.create(p["app_token"], p["table_id"], record["query"], record["json"]))

    def _bitable_update(self, record: dict[str, Any]) -> dict[str, Any]:
        p = record["params"]
        return ok(self.bitable.update(p["app_token"], p["table_id"], p["record_id"], record["json"]))



def ok(data: dict[str, Any]) -> dict[str, Any]:
    return {"code": 0, "msg": "success", "data": data}



def _ui(action: Callable[[], T]) -> T:
    """Python/control API calls report Feishu refusals as ValueError (the control API answers them 400)."""
    try:
        return action()
    except FeishuError as exc:
        raise ValueError(str(exc)) from None
