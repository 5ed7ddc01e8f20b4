"""JSON log lines on stdout, one event per line; callers pass ids via `extra`, never secrets."""

from __future__ import annotations

import json
import logging
import sys
import time

FIELDS = ("event_id", "message_id", "route_key", "exec_id", "job_id", "status", "reason", "batch",
          "attempt", "error", "duration_ms", "usage")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {"ts": round(time.time(), 3), "level": record.levelname, "logger": record.name,
                "msg": record.getMessage()}
        for name in FIELDS:
            if hasattr(record, name):
                line[name] = getattr(record, name)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def setup(level: str = "INFO") -> None:
    root = logging.getLogger()
    if any(isinstance(h.formatter, JsonFormatter) for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("urllib3", "httpx", "httpx2", "Lark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
