"""Items: record ↔ topic ↔ first-answer versions ↔ sessions, newest first, with links that open Feishu."""

from __future__ import annotations

from typing import Any

from flask import abort

from bitable import keys as item_keys
from bitable.index import Item
from bitable.refs import answer_link, record_link, topic_link
from console.features import item_panels
from console.web import bp, page, rt, window


@bp.get("/items")
def items() -> str:
    r, keys = rt().state, rt().keys
    win = window(total=r.zcard(item_keys.items_order(keys)))
    ids = [str(i) for i in r.zrevrange(item_keys.items_order(keys), win.offset, win.offset + win.limit - 1)]
    found = [rt().items.get(i) for i in ids]
    return page("items.html", rows=[_row(it) for it in found if it], win=win)


@bp.get("/items/<item_id>")
def item(item_id: str) -> str:
    found = rt().items.get(item_id)
    if found is None:
        abort(404)
    return page("item.html", it=rt().items.public(found), links=_links(found), panels=item_panels(item_id))


def _row(it: Item) -> dict[str, Any]:
    latest = rt().items.versions(it.item_id)[-1:] or []
    return {"item_id": it.item_id, "title": it.title, "record_id": it.record_id, "chat_id": it.chat_id,
            "thread_id": it.thread_id, "created_at": it.created_at, "analysis": it.analysis,
            "first_answer": f"v{latest[0].version} {latest[0].status}" if latest else "", **_links(it)}


def _links(it: Item) -> dict[str, str]:
    s = rt().settings
    origin = s.feishu_web_origin
    out = {"record_link": "", "topic_link": "", "answer_link": ""}
    if it.record_id and s.bitable_app_token and s.bitable_table_id:
        out["record_link"] = record_link(origin, s.bitable_app_token, s.bitable_table_id, it.record_id)
    if it.thread_id:
        out["topic_link"] = topic_link(origin, it.chat_id, it.thread_id)
    if it.answer_message_id:
        out["answer_link"] = answer_link(it.answer_link, origin, it.chat_id, it.thread_id)
    return out
