"""Who may undo a follow-up, and who is told. Pure: the callers read the facts (the record, now) and act.

A follow-up belongs to whoever asked for it. It may be cancelled by them, by an admin (ITEM_ADMINS), or by
the owner or reporter of the item it follows, read from the record at decision time. A `/reset` in a shared
conversation is no back door: it cancels only what the resetter may cancel and keeps the rest (it belongs
to its creators). Whenever someone cancels a follow-up they did not set, its creator is told.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from timers.model import Timer


def may_cancel(creator: str, who: str, admins: Collection[str], item_people: Collection[str]) -> bool:
    """`item_people`: the owner and reporter of the follow-up's item, as the record says now."""
    if not who:
        return False
    return who == creator or who in admins or who in item_people


@dataclass(frozen=True)
class ResetPlan:
    cancel: list[Timer]
    keep: list[Timer]


def on_reset(pending: Sequence[Timer], who: str, admins: Collection[str],
             item_people: Callable[[str], Collection[str]]) -> ResetPlan:
    """Which of a route's pending follow-ups a reset by `who` cancels; `item_people(item_id)` as above."""
    cancel: list[Timer] = []
    keep: list[Timer] = []
    for t in pending:
        people = item_people(t.item_id) if t.item_id and who != t.created_by and who not in admins else ()
        (cancel if may_cancel(t.created_by, who, admins, people) else keep).append(t)
    return ResetPlan(cancel=cancel, keep=keep)


def to_tell(cancelled: Sequence[Timer], who: str) -> dict[str, list[Timer]]:
    """Creators to tell, each with their follow-ups someone else cancelled (nobody is told of their own)."""
    out: dict[str, list[Timer]] = {}
    for t in cancelled:
        if t.created_by and t.created_by != who:
            out.setdefault(t.created_by, []).append(t)
    return out
