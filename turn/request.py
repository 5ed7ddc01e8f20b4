"""What a turn's request is made of besides the session: the batch sized to the budget (a lone long message spilled
behind read_message), the related discussion of a normal group, and who an @mention may reach."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from claude import budget as bud
from claude.prompt import estimate_tokens, format_batch, system_blocks
from core.inbound import Inbound
from feishu.identity import cached_name
from feishu.people import names
from memory import related, withdrawn
from runs.runtime import Runtime
from turn import recall, rotation


def budget(rt: Runtime) -> bud.Budget:
    """The request budget now (CONTEXT_BUDGET_TOKENS, MAX_OUTPUT_TOKENS, the profile's calibration factor)."""
    return rotation.budget_of(rt)


BATCH_SHARE = 0.6  # of the input room a batch may take; the rest holds the summary, history and tool results


def batch_room(rt: Runtime, route_key: str) -> tuple[bud.Budget, int]:
    """The budget at factor 1 (so every rerun of a batch sizes it alike) and the tokens a batch may take."""
    b = bud.Budget(rt.settings.context_budget_tokens, rt.settings.max_output_tokens)
    fixed = b.request_cost(system_of(rt), [], recall.tools_for(rt, route_key))
    return b, int(b.input_room(fixed) * BATCH_SHARE)


def batch_size(rt: Runtime, route_key: str, segment: Sequence[Inbound | None]) -> int:
    """How many of a turn segment's messages this turn answers: the leading ones that fit; the rest stay
    pending in the route's batch for the next turn, never cut off unseen (issue 14 A11)."""
    b, room = batch_room(rt, route_key)
    return b.leading_that_fit([format_batch([m]) if m else "" for m in segment], room)


def spilled(rt: Runtime, route_key: str, batch: Sequence[Inbound], bodies: list[str | None]) -> list[str | None]:
    """A lone message too long for the request: its head, and a handle read_message reads the rest with."""
    if len(batch) != 1 or bodies[:1] != [None]:
        return bodies
    b, room = batch_room(rt, route_key)
    m = batch[0]
    if b.cost(format_batch([m])) <= room:
        return bodies

    def note(cut: int) -> str:
        return (f'\n<spilled_rest of="{html.escape(m.message_id)}" offset="{cut}" chars="{len(m.text) - cut}"/> '
                f'Only the beginning of this message is shown: read the rest with read_message '
                f'(message_id="{html.escape(m.message_id)}", offset={cut}).')

    def tail(cut: int) -> str:  # the note, plus what escaping the head adds to it
        return note(cut) + "x" * (len(html.escape(m.text[:cut], quote=False)) - cut)

    cut = b.prefix_that_fits(m.text, room - 60, tail)
    return [html.escape(m.text[:cut], quote=False) + note(cut)]


def related_discussion(rt: Runtime, kind: str, batch: Sequence[Inbound]) -> str:
    """Recent unaddressed messages of a normal group (memory/related.py), up to the batch's last message."""
    if kind != "group":
        return ""
    last = batch[-1]
    before = int(last.create_time) / 1000 if last.create_time and last.create_time.isdigit() else None
    items = withdrawn.apply_to_related(rt.state, rt.keys, last.chat_id,
                                       related.recent(rt.state, rt.keys, last.chat_id, before=before))
    named = names_of(rt, [str(i.get("sender") or "") for i in items])
    return related.block(items, estimate_tokens, names=named, tz=rt.settings.tz)


def system_of(rt: Runtime, notes: str = "") -> list[dict[str, Any]]:
    """A request's system blocks: the deployment's rules, glossary, persona and team notes (one block, the same for
    every route), then rarely-changing notes."""
    return system_blocks(rt.persona, rt.team_notes, notes, cached_name(rt.state, rt.keys))


def people(rt: Runtime, batch: Sequence[Inbound]) -> dict[str, str]:
    """Who an @mention in the answer may reach: the batch's senders and the people they mentioned (not the bot), with
    their display names (the mention's own, else the contact API's: feishu/people.py)."""
    found = {m.sender_open_id: "" for m in batch if m.sender_open_id}
    found.update({x.open_id: x.name or "" for m in batch for x in m.mentions if x.open_id})
    found.pop(str(rt.state.get(rt.keys.bot_open_id) or ""), None)
    known = names_of(rt, [i for i, name in found.items() if not name])
    return {i: name or known.get(i, "") for i, name in found.items()}


def names_of(rt: Runtime, open_ids: Sequence[str]) -> dict[str, str]:
    """Display names of these people (cached per person; none for those Feishu does not name)."""
    return names(rt.feishu, rt.state, rt.keys, open_ids)
