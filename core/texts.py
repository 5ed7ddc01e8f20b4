"""The ground's user-facing texts (resets, status, evidence, failures), short and in the user's language (Chinese
by default), and `Texts`: how a room keeps its own (timers/texts.py, items/texts.py, …)."""

from __future__ import annotations

import re

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN = re.compile(r"[A-Za-z]")

TEXTS = {
    "stream_abandoned": {
        "zh": "（这条回答没有写完。）",
        "en": "(This answer was not finished.)",
    },
    "dead_letter": {
        "zh": "抱歉，这条消息我多次处理都失败了，已经记录下来，管理员会跟进。",
        "en": "Sorry, I failed to handle this message several times. It has been logged for an admin to follow up.",
    },
    "empty_answer": {
        "zh": "抱歉，我这次没有生成回答，请换个说法再试一次。",
        "en": "Sorry, I could not produce an answer this time. Please try rephrasing.",
    },
    "reset_done": {
        "zh": "好的，已开启新会话，之前的对话不会再带入。",
        "en": "OK, a new session has started. Earlier conversation will not be carried over.",
    },
    "reset_done_shared": {
        "zh": "好的，已为本话题的所有人开启新会话，之前的对话不会再带入。",
        "en": "OK, a new session has started for everyone in this topic. "
              "Earlier conversation will not be carried over.",
    },
    "reset_dropped": {
        "zh": "重置前还没处理的 {n} 条消息不再回答，需要的话请重新发送。",
        "en": "{n} message(s) sent before the reset were not answered; please send them again if needed.",
    },
    "status": {
        "zh": "会话 {session_id}（上一个：{parent_id}）\n代数 {generation} · 已用 {tokens_in} 输入 / "
              "{tokens_out} 输出 tokens · {turns} 轮\n关联事项：{item_id}",
        "en": "Session {session_id} (previous: {parent_id})\nGeneration {generation} · {tokens_in} input / "
              "{tokens_out} output tokens used · {turns} turns\nLinked item: {item_id}",
    },
    "evidence": {
        "zh": "（依据：{parts}）",
        "en": "(Based on: {parts})",
    },
}


def language_of(text: str) -> str:
    """'en' only for text with Latin letters and no CJK; Chinese otherwise."""
    if _CJK.search(text) or not _LATIN.search(text):
        return "zh"
    return "en"


def say(name: str, sample: str, **fields: object) -> str:
    """The text `name` in the language of `sample` (a slash command counts as Chinese, the default)."""
    return _said(TEXTS[name], sample, fields)


class Texts:
    """A room's own reply texts (`name` → {"zh": …, "en": …}), said like core's: `TEXTS.say(name, sample, **fields)`;
    a name it does not hold is core's (the reset, the status, the evidence line)."""

    def __init__(self, texts: dict[str, dict[str, str]]) -> None:
        self.texts = texts

    def say(self, name: str, sample: str, **fields: object) -> str:
        return _said(self.texts[name], sample, fields) if name in self.texts else say(name, sample, **fields)


def _said(text: dict[str, str], sample: str, fields: dict[str, object]) -> str:
    lang = "zh" if sample.lstrip().startswith("/") else language_of(sample)
    return text[lang].format(**fields) if fields else text[lang]
