"""A feature that is not in the product, for tests/test_plugins.py: "stamp" (`/stamp` posts a card whose button
counts the people who press it; a tool tells the model the count; a timer closes the card a minute later), with its
own key and its own setting. One module of the test package, on an App only `build_app` here builds (the stack
names it with APP_FACTORY=tests.throwaway:build_app): no file of the product knows it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic_settings import BaseSettings, SettingsConfigDict

from app import FEATURES
from app import build_app as product_app
from core.settings import Settings
from feishu.cards import choice_card
from timers import timers_of
from timers.model import Timer
from turn.registry import Action, App, Command, Context, Feature, Part, Said, TimerKind

NAME = "stamp"
CLOSE_AFTER_S = 60
TTL_S = 86400
TOOL = {"name": "stamp_count", "description": "How many people pressed this route's stamp card. Use it when "
        "someone asks how many have stamped; it takes no arguments and returns the count.",
        "input_schema": {"type": "object", "properties": {}}}


class StampSettings(BaseSettings):
    """The feature's own setting, a flat env name like the contract's."""

    model_config = SettingsConfigDict(env_ignore_empty=True, extra="ignore")
    stamp_word: str = "盖章"


def _word(c: Context) -> str:
    return c.settings.feature(StampSettings).stamp_word


def pressed_key(c: Context) -> str:
    return c.rt.keys.feature_of_route(NAME, c.rk, "pressed")


def _stamp(c: Context) -> Said | None:
    m, word = c.message, _word(c)
    card = choice_card(title=word, body=f"点下面的按钮{word}", buttons=[(word, {"action": "stamp:press", "rk": c.rk})])
    c.rt.outbox.card(c.destination, f"stamp-{m.message_id}", card)
    now = c.rt.clock.now()
    timers_of(c.rt).add(Timer(id=f"stamp_{m.message_id}", kind=NAME, route_key=c.rk, due=now + CLOSE_AFTER_S,
                              chat_id=m.chat_id, thread_id=m.thread_id or "", created_by=m.sender_id, created_at=now,
                              source_message_id=m.message_id), now=now)
    return None


def _press(c: Context) -> str:
    key = pressed_key(c)
    with c.rt.state.pipeline(transaction=True) as p:
        p.sadd(key, c.message.sender_id).expire(key, TTL_S).scard(key)
        n = p.execute()[-1]
    c.rt.outbox.reply(c.destination, c.batch_id, f"{_word(c)}：{n}")
    return "pressed"


def _close(c: Context) -> str:
    t = c.timer
    if t is None:
        return "gone"
    n = c.rt.state.scard(pressed_key(c))
    to = replace(c.destination, chat_id=t.chat_id, target=t.source_message_id)
    c.rt.outbox.reply(to, c.batch_id, f"{_word(c)}结束：{n} 人")
    return "closed"


class StampPart(Part):
    def __init__(self, turn: Context) -> None:
        self.turn = turn

    def call(self, name: str, args: dict[str, Any], room: int) -> str | None:
        if name != TOOL["name"]:
            return None
        return f"{self.turn.rt.state.scard(pressed_key(self.turn))} people pressed the stamp"


def _start(turn: Context, _parts: Mapping[str, Part]) -> Part:
    return StampPart(turn)


def standin(body: dict[str, Any]) -> Any:
    """As a model would: asked "多少人…" with the tool offered, call it; given its result, say the count."""
    names = {t.get("name") for t in body.get("tools") or []}
    last = body["messages"][-1]
    content = last.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    if results:
        inner = results[-1].get("content")
        text = inner if isinstance(inner, str) else "".join(x.get("text", "") for x in inner or [])
        return f"目前 {text.split(' ')[0]} 人盖了章。" if "pressed the stamp" in text else None
    asked = "".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    if TOOL["name"] in names and "多少人盖章" in asked:
        return [{"type": "tool_use", "id": "toolu_stamp" + str(len(body["messages"])), "name": TOOL["name"],
                 "input": {}}]
    return None


FEATURE = Feature(
    NAME, order=90, start=_start, tools=lambda _kind: [TOOL],
    commands=(Command("stamp", _stamp, words=("/stamp",)),),
    actions=(Action("press", _press),),
    timer_kinds=(TimerKind(NAME, _close),),
    standin=standin, settings=StampSettings,
)


def build_app(settings: Settings | None = None) -> App:
    return product_app(settings, (*FEATURES, FEATURE))
