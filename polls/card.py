"""The poll's card: the question, each option with its votes so far, a button per option while it is open. Pure."""

from __future__ import annotations

from datetime import datetime, tzinfo
from typing import Any

from feishu.cards import choice_card
from polls.store import Poll


def poll_card(poll: Poll, counts: list[int], tz: tzinfo) -> dict[str, Any]:
    total = sum(counts)
    lines = [f"{n + 1}. {option} — {counts[n]} 票" for n, option in enumerate(poll.options)]
    closes = datetime.fromtimestamp(poll.closes_at, tz).strftime("%m-%d %H:%M")
    if poll.state == "open":
        buttons = [(option, {"action": "polls:vote", "p": poll.id, "o": str(n), "rk": poll.route_key})
                   for n, option in enumerate(poll.options)]
        return choice_card(title=f"投票：{poll.question}", body="\n".join(lines), buttons=buttons,
                           footer=f"共 {total} 人投票 · 一人一票，截止前可改 · {closes} 截止")
    return choice_card(title=f"投票结果：{poll.question}", body="\n".join(lines), buttons=[],
                       footer=f"已截止 · 共 {total} 人投票", template="grey")


def result_text(poll: Poll, counts: list[int]) -> str:
    """The result posted when it closes: the leading option(s), then every count."""
    total = sum(counts)
    if not total:
        return f"投票「{poll.question}」已截止，没有人投票。"
    best = max(counts)
    leaders = "、".join(o for o, n in zip(poll.options, counts, strict=True) if n == best)
    detail = "；".join(f"{o} {n} 票" for o, n in zip(poll.options, counts, strict=True))
    return f"投票「{poll.question}」已截止，共 {total} 人投票，最多的是：{leaders}（{detail}）"
