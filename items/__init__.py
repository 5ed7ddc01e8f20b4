"""What items do. In: item work found by a run (a topic's opening report, `/登记`, `/item link`, a record event,
an approval click) and the turns of an item's topic. Out: Bitable records, first-answer cards with their versions,
approval cards, and item facts in a turn's request.

`claim` decides how an item comes to be; `first_answer` writes its first answer; `approvals` carries proposed record
changes to a decision; `context` reads item facts for a turn; `runs` dispatches item work inside a run;
`table_check` checks the items table and subscribes its record events.
"""

from items.approvals import post as propose_changes
from items.facts import is_member, item_of_turn, own_item
from items.settings import ItemSettings, item_settings

# What other features may use of items (tests/test_layout.py).
__all__ = ["ItemSettings", "is_member", "item_of_turn", "item_settings", "own_item", "propose_changes"]
