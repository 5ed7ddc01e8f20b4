"""The per-app limits of the document APIs that have their own (the rest share the generic tiers).

- docx v1 document get, blocks list, block children get: "应用频率限制：单个应用调用频率上限为每秒 5 次，超过该频率
  限制，接口将返回 HTTP 状态码 400 及错误码 99991400" (open.feishu.cn …/document-docx/docx-v1/document/get,
  document-block/list, document-block-children/get).
- drive v1 files download: "该接口调用频率上限为 5 QPS，10000 次/天。否则会返回 1061045 错误码，可通过稍后重试解决"
  (…/reference/drive-v1/file/download; 1061045 is HTTP 400 "resource contention occurred, please retry." in the
  drive file error tables, e.g. …/drive-v1/file/create_shortcut).
Each op is counted apart, at arrival, over a sliding second (and, for the download, a sliding day).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from sandbox.feishu.rules import FeishuError

PER_SECOND = {"doc_meta": 5, "doc_blocks": 5, "doc_children": 5, "drive_download": 5}
PER_DAY = {"drive_download": 10_000}
DAY_S = 86_400.0
REFUSAL = {"drive_download": (1061045, "resource contention occurred, please retry.")}
FREQUENCY = (99991400, "request trigger frequency limit")


class DocLimits:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.per_second, self.per_day = dict(PER_SECOND), dict(PER_DAY)
            self.calls: dict[tuple[str, float], deque[float]] = {}
            self.rejections: dict[str, int] = {}

    def set(self, op: str, *, per_second: int | None = None, per_day: int | None = None) -> None:
        with self.lock:
            if per_second is not None:
                self.per_second[op] = per_second
            if per_day is not None:
                self.per_day[op] = per_day

    def check(self, op: str) -> None:
        """Count a call of `op`, or refuse it as Feishu does when a window is full (a refused call is not counted)."""
        windows = [(1.0, self.per_second.get(op)), (DAY_S, self.per_day.get(op))]
        with self.lock:
            now = self.clock()
            queues = []
            for span, limit in windows:
                if limit is None:
                    continue
                calls = self.calls.setdefault((op, span), deque())
                while calls and now - calls[0] >= span:
                    calls.popleft()
                if len(calls) >= limit:
                    self.rejections[op] = self.rejections.get(op, 0) + 1
                    code, msg = REFUSAL.get(op, FREQUENCY)
                    raise FeishuError(code, msg, http_status=400)
                queues.append(calls)
            for calls in queues:
                calls.append(now)
