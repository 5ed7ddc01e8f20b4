"""Log lines on stdout, one event per line: readable text on a terminal, JSON for log shippers (LOG_FORMAT).

Callers pass ids via `extra`, never secrets. Both formats carry the same fields; text puts them after the
message as `key=value`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

FIELDS = ("event_id", "message_id", "route_key", "exec_id", "job_id", "status", "reason", "batch",
          "attempt", "error", "duration_ms", "usage")
# RQ logs two lines per job at INFO (started, finished) and its start-up banner; our own lines say what a run
# did, so on a terminal RQ speaks up only when something is wrong.
CHATTY = {"rq.worker": logging.WARNING, "rq.scheduler": logging.WARNING}


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in FIELDS if hasattr(record, name)}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {"ts": round(time.time(), 3), "level": record.levelname, "logger": record.name,
                "msg": record.getMessage(), **fields_of(record)}
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """`12:00:01 INFO  jobs.drain  turn answered  route_key=feishu:…:p2p:oc_1 duration_ms=812`."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        extra = " ".join(f"{k}={_short(v)}" for k, v in fields_of(record).items())
        line = f"{stamp} {record.levelname:<5} {record.name}  {record.getMessage()}" + (f"  {extra}" if extra else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 200 else text[:199] + "…"


def chosen_format(setting: str | None, stream: Any = None) -> str:
    """LOG_FORMAT when set; otherwise text on a terminal and JSON when piped (a process manager, a shipper).
    `make run` sets LOG_TERMINAL=1 when its own output is a terminal: honcho pipes every process's output, so
    they cannot see the terminal themselves."""
    if setting in ("text", "json"):
        return setting
    if os.environ.get("LOG_TERMINAL") == "1":
        return "text"
    stream = stream if stream is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    return "text" if isatty is not None and isatty() else "json"


def setup(level: str = "INFO", fmt: str | None = None) -> None:
    root = logging.getLogger()
    if any(isinstance(h.formatter, (JsonFormatter, TextFormatter)) for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stdout)
    text = chosen_format(fmt) == "text"
    handler.setFormatter(TextFormatter() if text else JsonFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("urllib3", "httpx", "httpx2", "Lark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if text and level != "DEBUG":
        for name, quiet in CHATTY.items():
            logging.getLogger(name).setLevel(quiet)


def rq_level(level: str) -> str | None:
    """The `logging_level` to hand RQ's `work()`: None leaves the quieter level `setup` gave its loggers."""
    quiet = logging.getLogger("rq.worker").level == CHATTY["rq.worker"]
    return None if quiet and level != "DEBUG" else level
