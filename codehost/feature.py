"""Code-platform webhooks as a feature (`FEATURE`): the two endpoints (`web`), the repository routes' fan-out
(`RouteWork` `hook`), the topic's events and card timer, `/watch` `/unwatch` `/watching`, links followed from turns,
overheard messages and records, housekeeping, the doctor's rows and the console's tables. The rest of the service
knows it only through the App."""

from __future__ import annotations

from codehost.commands import UNWATCH_COMMAND, WATCH_COMMAND, WATCHING_COMMAND
from codehost.fanout import EVENT_TYPE, fan_out, watches_of
from codehost.follow import overheard, record_read, start
from codehost.ingress import ROUTE_KIND
from codehost.keys import NAME, watches_all
from codehost.operators import PANELS, checks
from codehost.settings import CodehostSettings
from codehost.topic import CARD, on_event, post_card, rescue
from runs.runtime import Runtime
from turn.registry import Event, Feature, Gauge, Periodic, RouteWork, TimerKind, Web


def _web(rt: Runtime) -> Web:
    from codehost.web import web  # Flask only in the web process

    return web(rt)


def _housekeeping(rt: Runtime) -> int:
    """Watches past their expiry go; a topic card whose timer event was lost gets a new one."""
    return watches_of(rt).sweep(rt.clock.now()) + rescue(rt)


FEATURE = Feature(
    NAME, order=75, start=start,
    commands=(WATCH_COMMAND, UNWATCH_COMMAND, WATCHING_COMMAND),
    # A platform's event is no message of the topic's people: a /reset does not make it stale, and nobody sent it.
    events=(Event(EVENT_TYPE, on_event, stale_after_reset=False, tell_sender=False),),
    route_work=(RouteWork(ROUTE_KIND, fan_out),),
    timer_kinds=(TimerKind(CARD, post_card),),
    periodic=(Periodic("codehost", _housekeeping),),
    gauges=(Gauge("codehost_watches", "Code-platform threads watched by items", watches_all),),
    overheard=overheard, web=_web, checks=checks, panels=PANELS, record_read=record_read,
    settings=CodehostSettings,
)
