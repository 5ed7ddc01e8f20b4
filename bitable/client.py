"""Bitable records over lark-oapi: field list, schema, search, batch get, create and update, writes serialised."""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import lark_oapi as lark
import redis
from lark_oapi.api.bitable.v1 import (
    AppTableRecord,
    BatchGetAppTableRecordRequest,
    BatchGetAppTableRecordRequestBody,
    Condition,
    CreateAppTableRecordRequest,
    FilterInfo,
    ListAppTableFieldRequest,
    SearchAppTableRecordRequest,
    SearchAppTableRecordRequestBody,
    UpdateAppTableRecordRequest,
)
from lark_oapi.core.exception import ObtainAccessTokenException

from bitable.cells import cell_chat_ids, cell_links, cell_text, cell_user_ids
from bitable.errors import LOCAL_RETRY, TOKEN_INVALID, BitableError, SchemaError, classify
from bitable.lock import TableLock, lock_key
from bitable.schema import Column, Schema, check
from core.keys import Keys
from core.settings import Settings

log = logging.getLogger(__name__)

RETRY_DELAYS = (0.2, 0.4, 0.8, 1.6)  # seconds before tries 2..5 of a rate-limited or conflicting call
SEARCH_PAGE = 500  # the documented maximum
FIELDS_PAGE = 100
SCHEMA_TTL_S = 600  # a renamed column is noticed within this long (and at once by the hourly table check)
BATCH_GET_MAX = 100  # the documented maximum of ids per batch_get
MAX_CONDITIONS = 50  # the documented maximum of conditions in one search filter
USER_ID_TYPE = "open_id"

Match = tuple[str, str, Sequence[str]]  # one more search condition: (field name, operator, values)


@dataclass(frozen=True)
class Record:
    """One row: `fields` is the raw cell dict keyed by field name, as search/batch_get/create answer it."""

    record_id: str
    fields: Mapping[str, Any] = field(hash=False)
    record_url: str = ""
    created_time: int | None = None  # ms; only when the read asked for automatic fields
    last_modified_time: int | None = None  # ms; only when the read asked for automatic fields

    def text(self, name: str) -> str:
        return cell_text(self.fields.get(name))

    def users(self, name: str) -> list[str]:
        return cell_user_ids(self.fields.get(name))

    def links(self, name: str) -> list[str]:
        return cell_links(self.fields.get(name))

    def chats(self, name: str) -> list[str]:
        return cell_chat_ids(self.fields.get(name))

    @classmethod
    def from_wire(cls, item: Mapping[str, Any]) -> Record:
        fields = item.get("fields")
        url = item.get("record_url") or item.get("shared_url") or ""
        return cls(str(item.get("record_id") or item.get("id") or ""), dict(fields) if isinstance(fields, dict) else {},
                   str(url), _ms(item.get("created_time")), _ms(item.get("last_modified_time")))


def _ms(value: Any) -> int | None:
    """A millisecond timestamp as the wire carries it (a number, or digits), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def client_token_for(seed: str) -> str:
    """A valid uuid4 string derived from `seed`: a create retried after a crash sends the same client_token."""
    digest = hashlib.sha256(seed.encode("utf-8")).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def _check_client_token(token: str) -> None:
    try:
        parsed = uuid.UUID(token)
    except (ValueError, AttributeError, TypeError):
        parsed = None
    if parsed is None or parsed.version != 4 or str(parsed) != token:
        raise ValueError("client_token must be a uuid4 string (see client_token_for)")


class Bitable:
    """The items table. `lark_client` is FeishuApi(...).client, so the tenant token cache is shared."""

    def __init__(self, settings: Settings, state: redis.Redis, keys: Keys, lark_client: lark.Client) -> None:
        if not (settings.bitable_app_token and settings.bitable_table_id):
            raise ValueError("Bitable needs BITABLE_APP_TOKEN and BITABLE_TABLE_ID")
        self.settings, self.keys, self.client = settings, keys, lark_client
        self.app_token, self.table_id = settings.bitable_app_token, settings.bitable_table_id
        # One call may fetch a token and then make the request, each bounded by the SDK timeout.
        ttl = 2 * settings.feishu_timeout_seconds + 5
        self.lock = TableLock(state, lock_key(self.app_token, self.table_id), ttl_s=ttl, wait_s=ttl + 10)
        self._schema: Schema | None = None
        self._columns: dict[str, Column] = {}
        self._schema_lock = threading.Lock()
        self.state = state
        self._schema_key = f"{keys.prefix}:bitable:fields:{self.app_token}:{self.table_id}"

    # -- reads -----------------------------------------------------------------------------------------

    def fields(self) -> list[dict[str, Any]]:
        """The table's field list (field_id, field_name, type, ui_type, property, is_primary), all pages."""
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            builder = (ListAppTableFieldRequest.builder().app_token(self.app_token).table_id(self.table_id)
                       .page_size(FIELDS_PAGE))
            if token:
                builder = builder.page_token(token)
            data = self._call("fields", self.client.bitable.v1.app_table_field.list, builder.build())
            items += [i for i in data.get("items") or [] if isinstance(i, dict)]
            token = _next_page(data, token)
            if not token:
                return items

    def schema(self) -> Schema:
        """The configured columns, checked against the table (SchemaError if one is missing). The field list is
        shared through Redis for SCHEMA_TTL_S, so a forked work-horse does not read it again for every job."""
        with self._schema_lock:
            if self._schema is None:
                cached = self.state.get(self._schema_key)
                table_fields = json.loads(cached) if cached else self.fields()
                self._schema = check(self.settings, table_fields)
                self._columns = _columns(table_fields)
                if not cached:
                    self.state.set(self._schema_key, json.dumps(table_fields, ensure_ascii=False), ex=SCHEMA_TTL_S)
            return self._schema

    def column(self, name: str) -> Column | None:
        """An optional column of the table by its name (read with the schema), or None when the table has none."""
        self.schema()
        return self._columns.get(name)

    def check_now(self) -> Schema:
        """Read the field list now and check it (the start-up and hourly check); the shared copy follows."""
        table_fields = self.fields()
        try:
            schema = check(self.settings, table_fields)
        except SchemaError:
            self.state.delete(self._schema_key)
            raise
        self.state.set(self._schema_key, json.dumps(table_fields, ensure_ascii=False), ex=SCHEMA_TTL_S)
        with self._schema_lock:
            self._schema, self._columns = schema, _columns(table_fields)
        return schema

    def search(self, field_name: str, value: str | Sequence[str] | None, operator: str = "is", *,
               also: Sequence[Match] = (), automatic_fields: bool = False,
               page_size: int = SEARCH_PAGE) -> list[Record]:
        """Every record whose `field_name` matches (`is`, `contains`, `isEmpty` with None, ...) and every condition
        in `also` (all joined with "and"), all pages. `automatic_fields` adds created and last-modified times."""
        values = [] if value is None else [value] if isinstance(value, str) else list(value)
        matches: list[Match] = [(field_name, operator, values), *also]
        if len(matches) > MAX_CONDITIONS:
            raise ValueError(f"a Bitable search takes at most {MAX_CONDITIONS} conditions, not {len(matches)}")
        conditions = [Condition.builder().field_name(name).operator(op).value(list(vals)).build()
                      for name, op, vals in matches]
        body = (SearchAppTableRecordRequestBody.builder()
                .filter(FilterInfo.builder().conjunction("and").conditions(conditions).build())
                .automatic_fields(automatic_fields).build())
        records: list[Record] = []
        token = ""
        while True:
            builder = (SearchAppTableRecordRequest.builder().app_token(self.app_token).table_id(self.table_id)
                       .user_id_type(USER_ID_TYPE).page_size(page_size).request_body(body))
            if token:
                builder = builder.page_token(token)
            data = self._call("search", self.client.bitable.v1.app_table_record.search, builder.build())
            records += [Record.from_wire(i) for i in data.get("items") or [] if isinstance(i, dict)]
            token = _next_page(data, token)
            if not token:
                return records

    def batch_get(self, record_ids: Sequence[str]) -> dict[str, Record]:
        """record_id → Record for the ids that exist (absent or forbidden ids are simply missing)."""
        found: dict[str, Record] = {}
        ids = list(dict.fromkeys(record_ids))
        for start in range(0, len(ids), BATCH_GET_MAX):
            body = (BatchGetAppTableRecordRequestBody.builder().record_ids(ids[start:start + BATCH_GET_MAX])
                    .user_id_type(USER_ID_TYPE).with_shared_url(True).automatic_fields(False).build())
            req = (BatchGetAppTableRecordRequest.builder().app_token(self.app_token).table_id(self.table_id)
                   .request_body(body).build())
            data = self._call("batch_get", self.client.bitable.v1.app_table_record.batch_get, req)
            for item in data.get("records") or []:
                if isinstance(item, dict):
                    record = Record.from_wire(item)
                    found[record.record_id] = record
        return found

    # -- writes (one at a time per table, across processes) ---------------------------------------------

    def create(self, fields: Mapping[str, Any], client_token: str) -> Record:
        """A new record from field name → wire value; the same uuid4 `client_token` never creates twice."""
        _check_client_token(client_token)
        req = (CreateAppTableRecordRequest.builder().app_token(self.app_token).table_id(self.table_id)
               .user_id_type(USER_ID_TYPE).client_token(client_token)
               .request_body(AppTableRecord.builder().fields(dict(fields)).build()).build())
        data = self._call("create", self.client.bitable.v1.app_table_record.create, req, write=True)
        return Record.from_wire(data.get("record") or {})

    def update(self, record_id: str, fields: Mapping[str, Any]) -> Record:
        """Change only the given fields of one record."""
        req = (UpdateAppTableRecordRequest.builder().app_token(self.app_token).table_id(self.table_id)
               .record_id(record_id).user_id_type(USER_ID_TYPE)
               .request_body(AppTableRecord.builder().fields(dict(fields)).build()).build())
        data = self._call("update", self.client.bitable.v1.app_table_record.update, req, write=True)
        return Record.from_wire(data.get("record") or {})

    # -- one call: lock, token refresh, local retries, error mapping ---------------------------------------

    def _call(self, op: str, fn: Callable[[Any], Any], request: Any, *, write: bool = False) -> dict[str, Any]:
        """`data` of a successful answer. Rate limits and write conflicts are retried here with backoff;
        a write holds the table lock for one try only, so other writers progress between tries."""
        for delay in (*RETRY_DELAYS, None):
            guard: AbstractContextManager[None] = self.lock.held() if write else nullcontext()
            with guard:
                outcome = self._once(fn, request)
            if not isinstance(outcome, BitableError):
                return outcome
            self._log(op, outcome, final=delay is None or not _locally_retried(outcome))
            if delay is None or not _locally_retried(outcome):
                raise outcome
            time.sleep(delay * random.uniform(0.75, 1.25))  # jitter: colliding writers do not retry in step
        raise AssertionError("unreachable")

    def _once(self, fn: Callable[[Any], Any], request: Any) -> dict[str, Any] | BitableError:
        for attempt in (1, 2):
            try:
                resp = fn(request)
            except ObtainAccessTokenException as exc:  # lark-oapi raises when the token call fails
                return classify(int(exc.code or -1), str(exc.msg))
            except Exception as exc:  # transport failures and non-JSON bodies surface as exceptions
                return classify("transport", exc.__class__.__name__)
            raw = resp.raw
            if resp.success():
                body = json.loads(raw.content) if raw is not None and raw.content else {}
                data = body.get("data") if isinstance(body, dict) else None
                return data if isinstance(data, dict) else {}
            code = resp.code if isinstance(resp.code, int) else -1
            if code in TOKEN_INVALID and attempt == 1:
                self._drop_token()
                continue
            return classify(code, resp.msg or "", http_status=raw.status_code if raw is not None else 0,
                            log_id=resp.get_log_id() or "")
        raise AssertionError("unreachable")

    def _drop_token(self) -> None:
        cache = getattr(self.client.config, "cache", None)
        if cache is not None and hasattr(cache, "drop"):
            cache.drop(f"self_tenant_token:{self.client.config.app_id}")

    def _log(self, op: str, err: BitableError, *, final: bool) -> None:
        log.log(logging.WARNING if final else logging.INFO,
                "bitable %s %s: code=%s msg=%s http=%s app=%s table=%s log_id=%s", op,
                "failed" if final else "will retry", err.code, err.msg, err.http_status, self.app_token,
                self.table_id, err.log_id)


def _columns(table_fields: list[dict[str, Any]]) -> dict[str, Column]:
    """Every column of a field list by its name (the optional ones a feature may write: bitable/schema.py checks the
    configured ones)."""
    out = {}
    for f in table_fields:
        if isinstance(f, dict) and isinstance(f.get("field_name"), str):
            kind = f.get("type")
            out[f["field_name"]] = Column(f["field_name"], kind if isinstance(kind, int) else 0)
    return out


def _locally_retried(err: BitableError) -> bool:
    return err.code.isdigit() and int(err.code) in LOCAL_RETRY


def _next_page(data: Mapping[str, Any], current: str) -> str:
    """The next page token, or "" when done (also when a server repeats a token: never loop forever)."""
    token = data.get("page_token")
    if data.get("has_more") and isinstance(token, str) and token and token != current:
        return token
    return ""
