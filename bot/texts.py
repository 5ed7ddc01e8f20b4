"""User-facing bot texts, short and in the user's language (Chinese by default)."""

from __future__ import annotations

import re

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN = re.compile(r"[A-Za-z]")

TEXTS = {
    "dead_letter": {
        "zh": "抱歉，这条消息我多次处理都失败了，已经记录下来，管理员会跟进。",
        "en": "Sorry, I failed to handle this message several times. It has been logged for an admin to follow up.",
    },
    "empty_answer": {
        "zh": "抱歉，我这次没有生成回答，请换个说法再试一次。",
        "en": "Sorry, I could not produce an answer this time. Please try rephrasing.",
    },
}


def language_of(text: str) -> str:
    """'en' only for text with Latin letters and no CJK; Chinese otherwise."""
    if _CJK.search(text) or not _LATIN.search(text):
        return "zh"
    return "en"


def say(name: str, sample: str) -> str:
    return TEXTS[name][language_of(sample)]
