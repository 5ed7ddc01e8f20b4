"""Who may change an item's record or make a topic its home. Pure: callers read the record now and pass its people.

- A proposed record change (items/approvals.py) is decided by the record's owner or reporter, as the record
  says at the moment of the click, or by an admin (ITEM_ADMINS).
- `/item link` (items/claim.py) shows the record to the chat and makes the topic its home: the record's owner
  or reporter, an admin, or a member of one of the record's 来源群 chats may do it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection


def may_decide(who: str, admins: Collection[str], record_people: Collection[str]) -> bool:
    """`record_people`: the record's owners and reporters, read at decision time."""
    return bool(who) and (who in admins or who in record_people)


def may_link(who: str, admins: Collection[str], record_people: Collection[str], record_chats: Collection[str],
             member_of: Callable[[str, str], bool]) -> bool:
    """`member_of(chat_id, open_id)` is asked only when the people and admins did not decide it."""
    if may_decide(who, admins, record_people):
        return True
    return bool(who) and any(member_of(chat_id, who) for chat_id in record_chats)
