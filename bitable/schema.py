"""The items table's columns: the eleven configured field names, checked against the table's field list."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from bitable.cells import write_value
from bitable.errors import SchemaError
from core.settings import Settings

LOGICAL = ("title", "description", "reporter", "owner", "status", "chat", "topic_link", "item_id", "answer_link",
           "answer_status", "answer_version")


class FieldConfig(NamedTuple):
    attr: str  # the Settings attribute
    env: str  # the environment variable that sets it


FIELDS: Mapping[str, FieldConfig] = {
    name: FieldConfig(f"bitable_field_{name}", f"BITABLE_FIELD_{name.upper()}") for name in LOGICAL
}


class Column(NamedTuple):
    name: str  # the field name in the table, exactly as configured
    type: int  # Bitable field type (bitable.cells: TEXT, USER, URL, ...)
    options: tuple[str, ...] = ()  # a select field's option names, as the table lists them (property.options)


@dataclass(frozen=True)
class Schema:
    """Logical name → the table's column for it."""

    table_id: str
    columns: Mapping[str, Column]

    def __getitem__(self, logical: str) -> Column:
        return self.columns[logical]

    def name(self, logical: str) -> str:
        return self.columns[logical].name

    def encode(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Logical name → Python value, as the `fields` a create/update sends (field names, wire values).

        A ValueError names the logical field, its column and the type that refused the value.
        """
        wire: dict[str, Any] = {}
        for logical, value in values.items():
            column = self.columns[logical]
            try:
                wire[column.name] = write_value(column.type, value)
            except ValueError as exc:
                raise ValueError(f"{logical} ({column.name!r}): {exc}") from None
        return wire


def check(settings: Settings, table_fields: Iterable[Mapping[str, Any]]) -> Schema:
    """The Schema of the configured names; SchemaError naming every configured name the table lacks."""
    table_id = settings.bitable_table_id or ""
    types: dict[str, int] = {}
    options: dict[str, tuple[str, ...]] = {}
    for field in table_fields:
        name, kind = field.get("field_name"), field.get("type")
        if isinstance(name, str):
            types[name] = kind if isinstance(kind, int) else 0
            options[name] = _options(field)
    columns: dict[str, Column] = {}
    missing: list[str] = []
    for logical, config in FIELDS.items():
        configured: str = getattr(settings, config.attr)
        if configured in types:
            columns[logical] = Column(configured, types[configured], options[configured])
        else:
            missing.append(f"{config.env}={json.dumps(configured, ensure_ascii=False)} is not a field of table "
                           f"{table_id}")
    if missing:
        actual = ", ".join(json.dumps(n, ensure_ascii=False) for n in types) or "(none)"
        raise SchemaError("; ".join(missing) + f". The table's fields are: {actual}")
    return Schema(table_id, columns)


def _options(field: Mapping[str, Any]) -> tuple[str, ...]:
    """A select field's option names (`property.options[].name`, as the field list gives them); () for others."""
    prop = field.get("property")
    found = prop.get("options") if isinstance(prop, dict) else None
    return tuple(str(o["name"]) for o in found or [] if isinstance(o, dict) and o.get("name"))
