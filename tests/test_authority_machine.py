"""Issue 23 C: a stateful property test over the decisions of who may do what, when several people share a
conversation.

Actors: the asker, another member of the chat, a stranger, the item's owner, an admin (ITEM_ADMINS). Actions: ask
in a shared batch, set a reminder, cancel one, reset the conversation, recall a request, change the record's owner,
link the record to a topic, approve a proposed change. After every step the invariants hold:
- nobody acts for another: a reminder belongs to the sender of the message that asked for it, whoever spoke last;
- nothing of one person's is undone by someone not allowed (the creator, the record's owner or reporter as the
  record says *now*, or an admin), and no record change is approved or linked by anyone else;
- every cancelled reminder's creator is told when somebody else cancelled it.

The decisions are the service's own pure functions (timers/authority.py, items/authority.py, the follow-up
tool's choice of the asking message, the cancel reply's mentions); the model below restates the rules independently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from core.inbound import Inbound
from items import authority as items_authority
from timers import authority
from timers.commands import _cancelled
from timers.model import FOLLOWUP, Timer
from timers.tool import FollowupContext

ASKER, MEMBER, STRANGER, OWNER, ADMIN = "ou_asker", "ou_member", "ou_stranger", "ou_owner", "ou_admin"
PEOPLE = (ASKER, MEMBER, STRANGER, OWNER, ADMIN)
ADMINS = frozenset({ADMIN})
CHAT = "oc_team"
MEMBERS = frozenset({ASKER, MEMBER, OWNER})  # the stranger and the admin are not in the chat


def message(n: int, sender: str) -> Inbound:
    return Inbound(event_id=f"ev{n}", message_id=f"om_{n}", chat_id=CHAT, chat_type="group", sender_open_id=sender,
                   sender_type="user", message_type="text", text="提醒我", content="{}")


@dataclass
class Done:
    """What happened to one reminder, as the model saw it."""

    timer: Timer
    cancelled_by: str = ""
    told: set[str] = field(default_factory=set)
    allowed_then: bool = True  # whether the canceller was allowed at that moment (the model's own judgement)


class Seams(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0
        self.owner, self.reporter = OWNER, ASKER  # the record's people, as it says now
        self.reminders: dict[str, Done] = {}
        self.linked_by: list[tuple[str, bool, bool]] = []  # (who, decided, what the rules say at that moment)
        self.approved_by: list[tuple[str, bool, bool]] = []

    # -- what the model holds true ------------------------------------------------------------------------------

    def record_people(self) -> list[str]:
        return [self.owner, self.reporter]

    def may_undo(self, who: str, t: Timer) -> bool:
        return who == t.created_by or who in ADMINS or (bool(t.item_id) and who in self.record_people())

    def pending(self) -> list[Timer]:
        return [d.timer for d in self.reminders.values() if not d.cancelled_by]

    def cancel(self, t: Timer, who: str, told: set[str]) -> None:
        self.reminders[t.id] = Done(t, cancelled_by=who, told=told, allowed_then=self.may_undo(who, t))

    # -- actions ------------------------------------------------------------------------------------------------

    @rule(senders=st.lists(st.sampled_from(PEOPLE), min_size=1, max_size=4), asking=st.integers(0, 3),
          named=st.booleans(), item=st.booleans())
    def ask_for_a_reminder(self, senders: list[str], asking: int, named: bool, item: bool) -> None:
        """Several people's messages in one batch; one of them asks for a reminder (named by the model, or not)."""
        batch = []
        for who in senders:
            self.n += 1
            batch.append(message(self.n, who))
        asker = batch[asking % len(batch)]
        ctx = FollowupContext("feishu:t:topic:oc_team:omt_1", f"b{self.n}", batch, gen=0)
        chosen = ctx.asking(asker.message_id if named else "")
        if chosen is None:  # unnamed in a batch of several: the tool refuses rather than guess
            assert not named and len(batch) > 1
            return
        t = Timer(id=f"f_{self.n}", kind=FOLLOWUP, route_key=ctx.rk, due=1e10, chat_id=CHAT,
                  item_id="itm_1" if item else "", created_by=chosen.sender_id, source_message_id=chosen.message_id)
        assert chosen.message_id == (asker.message_id if named else batch[0].message_id)
        self.reminders[t.id] = Done(t)

    @precondition(lambda self: bool(self.pending()))
    @rule(who=st.sampled_from(PEOPLE), pick=st.integers(0, 50))
    def cancel_one(self, who: str, pick: int) -> None:
        pending = self.pending()
        t = pending[pick % len(pending)]
        people = self.record_people() if t.item_id else []
        if not authority.may_cancel(t.created_by, who, ADMINS, people):
            assert not self.may_undo(who, t)
            return
        said = _cancelled(message(0, who), t, {"id": t.id, "when": "x", "what": t.what})
        self.cancel(t, who, set(said.people))

    @rule(who=st.sampled_from(PEOPLE))
    def reset(self, who: str) -> None:
        pending = self.pending()
        plan = authority.on_reset(pending, who, ADMINS, lambda _item: self.record_people())
        told = authority.to_tell(plan.cancel, who)
        assert {t.id for t in plan.cancel} | {t.id for t in plan.keep} == {t.id for t in pending}
        for t in plan.cancel:
            self.cancel(t, who, {t.created_by} if t.created_by in told else set())

    @precondition(lambda self: bool(self.pending()))
    @rule(pick=st.integers(0, 50))
    def recall_a_request(self, pick: int) -> None:
        """Only a message's sender recalls it (a group manager's recall Feishu itself tells the sender of)."""
        pending = self.pending()
        source = pending[pick % len(pending)].source_message_id
        for t in pending:
            if t.source_message_id == source:
                self.cancel(t, t.created_by, set())

    @rule(new_owner=st.sampled_from(PEOPLE))
    def the_record_changes_hands(self, new_owner: str) -> None:
        self.owner = new_owner

    @rule(who=st.sampled_from(PEOPLE))
    def link_the_record(self, who: str) -> None:
        allowed = items_authority.may_link(who, ADMINS, self.record_people(), [CHAT],
                                           lambda chat, person: chat == CHAT and person in MEMBERS)
        self.linked_by.append((who, allowed, who in ADMINS or who in self.record_people() or who in MEMBERS))

    @rule(who=st.sampled_from(PEOPLE))
    def approve_a_change(self, who: str) -> None:
        allowed = items_authority.may_decide(who, ADMINS, self.record_people())
        self.approved_by.append((who, allowed, who in ADMINS or who in self.record_people()))

    # -- invariants ---------------------------------------------------------------------------------------------

    @invariant()
    def nobody_acts_for_another(self) -> None:
        for done in self.reminders.values():
            assert done.timer.source_message_id  # every reminder names the message that asked for it
            assert done.timer.created_by in PEOPLE

    @invariant()
    def nothing_is_undone_by_someone_not_allowed(self) -> None:
        for done in self.reminders.values():
            if done.cancelled_by:
                assert done.allowed_then, done

    @invariant()
    def every_cancelled_reminders_creator_is_told(self) -> None:
        for done in self.reminders.values():
            if done.cancelled_by and done.cancelled_by != done.timer.created_by:
                assert done.timer.created_by in done.told, done

    @invariant()
    def only_the_records_people_admins_and_members_link_and_approve(self) -> None:
        """Judged with the record as it said at the moment of each decision."""
        for who, allowed, expected in [*self.linked_by, *self.approved_by]:
            assert allowed == expected, who


Seams.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
TestSeams = Seams.TestCase
