"""Bitable (多维表格) adapter for business items: cell formats, the configured schema, a serialised client."""

from __future__ import annotations

from bitable.cells import cell_links, cell_text, cell_user_ids, write_value
from bitable.client import Bitable, Record, client_token_for
from bitable.errors import BitableError, BitablePaused, BitablePermanent, BitableRetryable, SchemaError, classify
from bitable.schema import FIELDS, Column, Schema, check

__all__ = [
    "FIELDS", "Bitable", "BitableError", "BitablePaused", "BitablePermanent", "BitableRetryable", "Column", "Record",
    "Schema", "SchemaError", "cell_links", "cell_text", "cell_user_ids", "check", "classify", "client_token_for",
    "write_value",
]
