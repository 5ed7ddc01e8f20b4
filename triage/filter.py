"""Quiet triage's fast path: the cheap deterministic filter in front of the small model.

In an opted-in group, messages posted in a topic linked to a tracked item but not addressed to the bot are kept,
and after a quiet period one small-model request per topic decides whether any of them is new evidence. Most
group traffic is not: greetings, acknowledgements, laughter, a sticker or an emoji, punctuation, a word or two.
`worth_triage` drops those before they cost anything, and `dedupe` drops a pasted repeat of a message already
seen (compared by `normalise`, so case, spacing, punctuation and emoji do not make it new). Pure: no I/O, no
model; everything that survives is left to the model, which stays quiet by default.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

_STICKER = re.compile(r"\[[^\[\]\s]{1,8}\]")  # emoji codes in Feishu text: [赞] [OK] [Smile]
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")
# Words that say nothing about an item, as `normalise` leaves them; a text made only of these is not worth triage.
_FILLER_WORDS = """
早 早安 早上好 上午好 中午好 下午好 晚上好 晚安 大家 大家好 各位 你好 您好 哈喽 嗨 你 您 们 大佬 老师 同学
收到 好的 好滴 好嘞 好哒 好 行 可以 没问题 明白 了解 懂了 知道了 嗯 恩 哦 噢 喔 对 是的 加一
谢谢 多谢 感谢 辛苦 太好了 太棒了 棒 赞 牛 厉害 哈 呵 嘿 嘻 笑死 了 啊 呀 啦 吧 呢 嘛 哇 哟 的 滴
ok okay k hi hello hey morning good gm thanks thank you thx ty lol lmao h ha haha yes yep yeah noted got it
np all everyone guys team alot much so sure cool nice great 1 6 233 3
"""
_FILLERS = frozenset(_FILLER_WORDS.split())
_LONGEST = max(map(len, _FILLERS))


def normalise(text: str) -> str:
    """The text as duplicates are compared: NFKC, casefolded, letters and digits only (no punctuation,
    whitespace, symbols or emoji)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in folded if unicodedata.category(c)[0] in "LN")


def _only_fillers(core: str) -> bool:
    """Whether `core` splits into filler words (word-break by dynamic programming: linear, no backtracking)."""
    reach = [True] + [False] * len(core)
    for i in range(len(core)):
        if reach[i]:
            for j in range(i + 1, min(len(core), i + _LONGEST) + 1):
                reach[j] = reach[j] or core[i:j] in _FILLERS
    return reach[-1]


def worth_triage(text: str) -> bool:
    """Whether a message may carry evidence and is worth a model's look. False for greetings, acknowledgements,
    laughter, emoji/sticker-only or punctuation-only texts, and texts under 4 letters or digits (3 when one of
    them is Chinese: a character says more than a letter)."""
    core = normalise(_STICKER.sub("", text))
    if len(core) < (3 if _CJK.search(core) else 4):
        return False
    return not _only_fillers(core)


def dedupe(texts: Sequence[str]) -> list[int]:
    """Indexes of the first occurrence of each distinct normalised text, in order."""
    seen: set[str] = set()
    firsts: list[int] = []
    for index, text in enumerate(texts):
        key = normalise(text)
        if key not in seen:
            seen.add(key)
            firsts.append(index)
    return firsts
