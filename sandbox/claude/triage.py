"""The stand-in's quiet triage: a deterministic keyword classifier of the kind a small model approximates. Offline.

A request whose system prompt carries SYSTEM_MARKER gets one JSON decision about the <message> elements of the
last user turn. A message is evidence when one of its clauses states something about the problem: a strong word
(复现, 日志, 报错, 异常, 堆栈, 根因, 定位到, 验证通过, timeout, an HTTP status...) or weak ones backed by another
weak one or by 也/都/同样 (环境 + 也, 接口 + a timing, 安卓 + 失败...). A clause that asks (？, 吗, 谁, 你看下...),
plans or guesses (晚点, 明天, 一下, 感觉, 应该...) or suggests (…吧) carries no evidence, whatever words it has:
"昨天那个日志会议改到几点？" and "日志晚点再看" stay quiet. A clause that @-mentions someone counts only with a strong
word: "@王磊 测试环境能复现了" is evidence, "@王磊 环境配好了" is not.

- no evidence → {"decision": "quiet"};
- evidence → "note": "新证据：<the first evidence message, clipped>", evidence [its message_id];
- and when an evidence message implies a status change (已修复/修好了/验证通过 → 已解决; 能复现/复现了/确认是bug/
  定位到/根因 → 处理中) that the item's <status> does not already say → "propose" with that value; the latest
  such message wins and its words are the note (evidence: the first evidence message and it).
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from sandbox.claude.items import _system_text
from sandbox.claude.wire import block_text
from triage.protocol import SYSTEM_MARKER

_MESSAGE = re.compile(r"<message\b([^>]*)>(.*?)</message>", re.DOTALL)
_ID = re.compile(r'message_id="([^"]*)"')
_STATUS = re.compile(r"<status>(.*?)</status>", re.DOTALL)
_CLAUSE = re.compile(r"[^。！!？?；;，,：:\n]+[。！!？?；;，,：:\n]*")

_STRONG = re.compile(
    r"复现|重现|必现|必挂|必崩|日志|(?<![a-z])logs?(?![a-z])|报错|错误|error|堆栈|stack ?trace|traceback|异常|exception"
    r"|崩溃|闪退|crash|根因|root cause|定位到|排查到|查到|找到原因|原因是|确认是|验证通过|回归|已修复|修好了|修复验证"
    r"|超时|timeout|timed out|慢查询|oom|outofmemory|空指针|npe|null ?pointer|抓包|p99|reproduc"
    r"|http ?\d{3}|(?<![0-9a-z_/.#-])[45]\d\d(?![0-9a-z_/.-])")  # a status, not part of a name (octo/inj_e512b)
_WEAK = [re.compile(p) for p in (
    r"版本|v\d", r"环境|staging|prod", r"生产|线上|预发", r"截图|录屏", r"客户|用户", r"影响", r"接口|api",
    r"sql|索引", r"缓存|cache", r"配置|变更", r"失败|fail", r"乱码", r"内存|cpu|磁盘", r"监控|告警", r"任务|调度",
    r"iphone|ios|android|安卓|鸿蒙", r"浏览器|chrome|safari|firefox|edge", r"试了|测了|实测", r"\d{2,}|\d\.\d",
    r"\d\s*(?:ms|毫秒|秒|分钟|小时|s|min)(?![a-z])")]
_ALSO = re.compile(r"也|都|同样|一样|全部|均")
_AT = re.compile(r"[@＠]\S*")
_ASKS = re.compile(r"[？?]|吗|请问|谁|有没有|是不是|能不能|会不会|要不要|几点|多少|哪|什么时候|怎么样"
                   r"|你看下|你看看|你们|帮忙看|麻烦")
_HEDGES = re.compile(r"吧[。！!~～]*$|感觉|好像|可能|估计|应该|我记得|猜|晚点|待会|回头|等下|等上|明天|下周|稍后"
                     r"|先去|准备|打算|计划|我来|一会|再说|看看|看下|看一下|一下|会议|开会|还没|如果|要是")
_RESOLVED = re.compile(r"已修复|修好了|修复了|验证通过|回归通过|修复验证")
_IN_PROGRESS = re.compile(r"能复现|复现了|必现|稳定复现|确认是\s*bug|定位到|根因|排查到|找到原因|原因是")


def _evidence(text: str) -> bool:
    clauses = [c.casefold() for c in _CLAUSE.findall(text.replace(". ", "。"))]
    stated = []
    for clause in clauses:
        bare = _AT.sub(" ", clause).strip()
        if _ASKS.search(bare) or _HEDGES.search(bare):
            continue
        if bare != clause.strip() and not _STRONG.search(bare):
            continue  # addressed to someone: only a strong evidence word makes it more than talk between people
        stated.append(bare)
    if any(_STRONG.search(c) for c in stated):
        return True
    weak = {i for c in stated for i, pattern in enumerate(_WEAK) if pattern.search(c)}
    return len(weak) >= 2 or (bool(weak) and any(_ALSO.search(c) for c in stated))


def _implied(text: str) -> str:
    if _RESOLVED.search(text):
        return "已解决"
    return "处理中" if _IN_PROGRESS.search(text.casefold()) else ""


def triage_reply(body: dict[str, Any]) -> str | None:
    """The triage decision as JSON text, or None when the request is not a quiet-triage request."""
    if SYSTEM_MARKER not in _system_text(body):
        return None
    users = [m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"]
    text = block_text(users[-1].get("content") or "") if users else ""
    status = _STATUS.search(text)
    current = html.unescape(status.group(1)).strip() if status else ""
    found = [(html.unescape(m.group(1) if (m := _ID.search(attrs)) else ""), html.unescape(inner).strip())
             for attrs, inner in _MESSAGE.findall(text)]
    evidence = [(mid, words) for mid, words in found if _evidence(words)]
    if not evidence:
        return json.dumps({"decision": "quiet"})
    implying = [(mid, words, value) for mid, words in evidence if (value := _implied(words))]
    if implying and implying[-1][2] != current:
        mid, words, value = implying[-1]
        ids = list(dict.fromkeys([evidence[0][0], mid]))
        return json.dumps({"decision": "propose", "note": f"{_note(words)}，建议把状态改为{value}", "field": "status",
                           "value": value, "evidence": ids}, ensure_ascii=False)
    return json.dumps({"decision": "note", "note": _note(evidence[0][1]), "evidence": [evidence[0][0]]},
                      ensure_ascii=False)


def _note(words: str) -> str:
    return "新证据：" + (words if len(words) <= 30 else words[:29] + "…")
