"""The routing simulator: a chat, chat type, sender and topic → whether the message is admitted, its route key and
queue, and the ROUTING_* setting behind each, under the running configuration.

It runs the service's own functions (`routing.admission.admit`, `routing.keys.route_for`) on a message built from
the form, so what it shows is what the webhook would do; `routing.explain` only names the rules.
"""

from __future__ import annotations

from typing import Any

from flask import request

from console.web import bp, page, rt
from core.inbound import Inbound, Mention
from feishu import identity
from routing import explain
from routing.admission import admit
from routing.keys import route_for

CHAT_TYPES = ("group", "p2p")


@bp.get("/routing")
def routing() -> str:
    form = {k: request.args.get(k, "").strip() for k in ("chat_id", "chat_type", "sender", "thread_id")}
    form["chat_type"] = form["chat_type"] if form["chat_type"] in CHAT_TYPES else "group"
    form["mention"] = request.args.get("mention", "1" if not request.args else "")
    result = simulate(**form) if form["chat_id"] and form["sender"] else None
    return page("routing.html", form=form, result=result, chat_types=CHAT_TYPES)


def simulate(chat_id: str, chat_type: str, sender: str, thread_id: str, mention: str) -> dict[str, Any]:
    x = rt()
    bot = identity.cached_open_id(x.state, x.keys) or "ou_bot_unknown"
    inbound = Inbound(event_id="simulated", message_id="simulated", chat_id=chat_id, chat_type=chat_type,
                      sender_open_id=sender, sender_type="user", message_type="text", text="", content="{}",
                      thread_id=(thread_id or None) if chat_type != "p2p" else None,
                      mentions=[Mention(key="@_user_1", open_id=bot)] if mention else [])
    verdict = admit(inbound, x.policy, bot)
    out: dict[str, Any] = {"admitted": verdict.admit, "reason": verdict.reason,
                           "admission_rule": explain.admission_rule(verdict.reason, inbound, x.policy)}
    route = route_for(inbound, x.policy, x.settings.bot_profile)
    out.update(route_key=route.key, kind=route.kind, queue=route.queue,
               scope_rule=explain.scope_rule(inbound, x.policy), queue_rule=explain.queue_rule(inbound, x.policy),
               known=x.state.zscore(x.keys.routes, route.key) is not None)
    return out
