"""Items as a feature (turn/registry.py): their part of a turn, their commands, their card buttons (`items:approve`,
`items:reject`), topic openings and the item route's work. The turn and the drain learn of items only through
`FEATURE`, added to the App by app.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bitable.refs import record_link
from claude.client import Completion
from feishu.cards import STATUS_ZH
from items import approvals, claim, table_check
from items import facts as item_context
from items.runs import item_entry, item_gave_up
from items.settings import ItemSettings, item_settings
from items.texts import say
from routing.keys import ITEM
from turn.registry import (
    Action,
    Command,
    Context,
    Feature,
    Opener,
    Part,
    Periodic,
    Probe,
    RouteWork,
    Said,
    ToolRefused,
)


class ItemsPart(Part):
    """The route's own item and the items the batch names: facts before the batch, the version relied on in the
    footer, a refusal in front for items the sender may not see, and the propose tool when the item has a record."""

    def __init__(self, turn: Context) -> None:
        self.turn = turn
        self.ctx = item_context.build(turn.rt, turn.kind, turn.batch)  # read fresh: never in the session log
        self.proposals: list[dict[str, Any]] = []

    def links(self) -> list[Any]:
        return list(self.ctx.materials)  # the documents the records of the turn's items list

    def evidence(self) -> list[str]:
        return [self.ctx.evidence] if self.ctx.evidence else []

    def block(self) -> str:
        return self.ctx.block

    def prefix(self) -> str:
        return self.ctx.prefix

    def footer(self, text: str) -> str:
        return "" if self.ctx.evidence else self.ctx.footer  # the analysis is pending or failed: said so

    def unavailable(self) -> dict[str, str]:
        item = self.ctx.item
        if item and item.record_id:
            return {}
        why = "items are off (no items table)" if self.turn.rt.bitable is None else \
            "this conversation tracks no item with a record"
        return {approvals.PROPOSE["name"]: why}

    def call(self, name: str, args: dict[str, Any], room: int) -> str | None:
        if name != approvals.PROPOSE["name"]:
            return None
        why = approvals.check_proposal(args, statuses(self.turn.rt))  # kept for after the reply: nothing written now
        if why:
            raise ToolRefused(f"not proposed: {why}")
        if len(self.proposals) >= approvals.MAX_PROPOSALS:
            raise ToolRefused("not proposed: too many proposals in one reply")
        self.proposals.append({k: args.get(k) for k in ("field", "value", "reason")})
        return ("proposed: an approval card will follow your reply; the record changes only if its owner, its "
                "reporter or an admin approves. Tell the user that.")

    def record(self) -> dict[str, Any]:
        return {"proposals": self.proposals} if self.proposals else {}

    def answered(self, session_id: str) -> None:
        for item in self.ctx.used:
            self.turn.rt.items.touch(item.item_id, self.turn.rk, session_id)


def start(turn: Context, _parts: Mapping[str, Part]) -> ItemsPart:
    return ItemsPart(turn)


def replied(turn: Context, completion: Completion) -> None:
    """The turn's proposals, from its kept answer (so a rerun posts the same cards): an approval card each."""
    proposals = (completion.recall or {}).get("proposals") or []
    item = item_context.own_item(turn.rt, turn.kind, turn.batch) if proposals else None
    if item and item.record_id:
        approvals.post(turn, item, proposals)


def status(c: Context, none: str) -> str:
    """The route's item for /status: the record link and the first answer's latest version (from the index: /status
    reads no Bitable)."""
    item = c.rt.items.of_route(c.rk)
    if item is None:
        return ""
    s = c.rt.settings
    link = record_link(s.feishu_web_origin, s.bitable_app_token or "", s.bitable_table_id or "", item.record_id) \
        if item.record_id else none
    versions = c.rt.items.versions(item.item_id)
    latest = versions[-1] if versions else None
    return say("status_item", c.message.text, record_link=link, version=latest.version if latest else 0,
               answer_status=STATUS_ZH.get(latest.status, latest.status) if latest else none)


def _command(name: str) -> Any:
    def run(c: Context) -> Said:
        return Said(claim.item_command(c.rt, c.rk, c.message, name, c.fence))
    return run


def _opens(message: Any, kind: str, settings: Any) -> bool:
    """With ITEM_CREATE_POLICY=topic_root, the @bot message that opens a topic becomes an item."""
    return kind == "topic" and settings.items_enabled and item_settings(settings).item_create_policy == "topic_root" \
        and claim.opens_topic(message)


def _open(c: Context) -> None:
    if c.rt.bitable is not None:
        claim.open_from_topic(c.rt, c.message, "topic_root")  # its first-answer card is the reply


def _decide(c: Context) -> str:
    return approvals.decide(c)


def _legacy(verb: str) -> Any:
    """A button of a card posted before actions were namespaced: `{"a": "approve", "p": "prop_…"}`."""
    return lambda value: value.get("a") == verb and "action" not in value


def _probe_table(rt: Any) -> None:
    """While the items table paused work: raises until its field names match (no table configured: nothing to wait
    for)."""
    if rt.bitable is not None:
        table_check.probe(rt)


def statuses(rt: Any) -> tuple[str, ...]:
    """The items table's status options (its field list, cached: bitable/client.py); () when not known."""
    if rt.bitable is None:
        return ()
    try:
        return tuple(rt.bitable.schema()["status"].options)
    except Exception:  # the table is checked elsewhere (table_check); a proposal then takes any status
        return ()


def tools_in(rt: Any) -> list[dict[str, Any]]:
    """propose_record_change as this deployment offers it: with the table's status options; none without a table."""
    return [approvals.propose_tool(statuses(rt))] if rt.bitable is not None else []


FEATURE = Feature(
    "items", order=10, start=start, replied=replied, status=status, tools_in=tools_in,
    tools=lambda kind: [approvals.PROPOSE] if kind == "topic" else [],
    commands=(Command("item_new", _command("item_new"), words=("/登记", "/item new")),
              Command("item_link", _command("item_link"), pattern=claim.LINK)),
    actions=tuple(Action(verb, _decide, legacy=_legacy(verb)) for verb in approvals.DECISIONS),
    openers=(Opener("item_open", _opens, _open),),
    route_work=(RouteWork(ITEM, lambda c: item_entry(c.rt, c.rk, c.message, c.fence),
                          gave_up=lambda c, reason: item_gave_up(c.rt, c.rk, c.message, reason, c.fence)),),
    # The table's field names checked and its record events subscribed: at start, hourly, every 30 s while it fails.
    periodic=(Periodic("items table", table_check.run, every=lambda _s: table_check.CHECK_EVERY_S, side=True,
                       retry=lambda _s: table_check.RETRY_S),),
    probes=(Probe(table_check.COMPONENT, _probe_table),),
    settings=ItemSettings,
)
