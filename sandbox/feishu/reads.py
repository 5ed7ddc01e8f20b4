"""Reading the emulator's messages back: inspection, GET (merge_forward bundles), list, message resources."""

from __future__ import annotations

import copy
import json
import threading
from typing import TYPE_CHECKING, Any

from sandbox.feishu.events import FORWARDED_CONTENT
from sandbox.feishu.rules import FeishuError, Resource, decode_page, encode_page, forward_item, page_size, time_filter


class MessageReads:
    """Mixed into FeishuStore: state lives there (see FeishuStore.reset), under its lock."""

    if TYPE_CHECKING:
        lock: threading.RLock
        chats: dict[str, dict[str, Any]]
        messages: list[dict[str, Any]]
        by_id: dict[str, dict[str, Any]]
        by_chat: dict[str, list[dict[str, Any]]]
        by_thread: dict[str, list[dict[str, Any]]]
        bot_sent: list[dict[str, Any]]
        bot_replies: dict[str, list[dict[str, Any]]]
        thread_roots: dict[str, str]
        send_times: dict[str, list[float]]
        forwarded: dict[str, list[dict[str, Any]]]
        forward_child: dict[str, dict[str, Any]]
        resources: dict[tuple[str, str], Resource]
        user_names: dict[str, str]

        def _now_ms(self) -> str: ...

        def add_user_message(
            self, message_id: str | None, chat_id: str, *, content: str, sender_open_id: str,
            msg_type: str = ..., thread_id: str | None = ..., root_id: str | None = ...,
            parent_id: str | None = ..., chat_mode: str = ...,
        ) -> dict[str, Any]: ...


    # -- inspection (indexed; copies only what is returned) ------------------------------------------

    def bot_messages(self, chat_id: str | None = None, thread_id: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            if thread_id is not None:
                pool = self.by_thread.get(thread_id, [])
            elif chat_id is not None:
                pool = self.by_chat.get(chat_id, [])
            else:
                pool = self.bot_sent
            picked = [
                m for m in pool
                if m["sender"]["sender_type"] == "app" and (chat_id is None or m["chat_id"] == chat_id)
            ]
            return copy.deepcopy(picked)

    def replies_to(self, message_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return copy.deepcopy(self.bot_replies.get(message_id, []))

    def feed(self, cursor: int, bot_only: bool) -> tuple[list[dict[str, Any]], int]:
        """Messages stored at or after position `cursor` (the next cursor is returned with them)."""
        with self.lock:
            fresh = self.messages[max(cursor, 0):]
            if bot_only:
                fresh = [m for m in fresh if m["sender"]["sender_type"] == "app"]
            return copy.deepcopy(fresh), len(self.messages)

    def send_log(self, chat_id: str | None = None) -> dict[str, list[float]]:
        with self.lock:
            chats = [chat_id] if chat_id is not None else list(self.send_times)
            return {c: list(self.send_times.get(c, [])) for c in chats}

    def peak_sends(self, window: float = 1.0) -> dict[str, int]:
        """Per chat, the most bot sends that fell within any `window` seconds (Feishu allows 5 per second)."""
        with self.lock:
            return {chat: _peak(times, window) for chat, times in self.send_times.items()}

    def get(self, message_id: str, with_sender_name: bool = False) -> dict[str, Any]:
        """GET message: a merge_forward answers itself plus every descendant (`upper_message_id` links them)."""
        with self.lock:
            msg = self.by_id.get(message_id) or self.forward_child.get(message_id)
            if msg is None:
                raise FeishuError(231003)
            items = copy.deepcopy([msg, *self.forwarded.get(message_id, [])])
        if with_sender_name:
            for item in items:
                name = self.user_names.get(item["sender"]["id"])
                if name:
                    item["sender"]["sender_name"] = name
        return {"items": items}

    # -- merge_forward bundles and message resources (seeded by tests) --------------------------------

    def add_forward(
        self, message_id: str | None, chat_id: str, children: list[dict[str, Any]], *, sender_open_id: str,
        chat_mode: str = "group", thread_id: str | None = None,
    ) -> dict[str, Any]:
        """A merge_forward message whose bundle holds `children` (see `forward_item` for their fields)."""
        with self.lock:
            bundle = self.add_user_message(
                message_id, chat_id, content=json.dumps({"content": FORWARDED_CONTENT}),
                sender_open_id=sender_open_id, msg_type="merge_forward", thread_id=thread_id, chat_mode=chat_mode,
            )
            flat: list[dict[str, Any]] = []
            self._forward_level(bundle["message_id"], children, chat_id, flat)
            self.forwarded[bundle["message_id"]] = flat
            return {**bundle, "children": copy.deepcopy(flat)}

    def _forward_level(
        self, upper_id: str, children: list[dict[str, Any]], chat_id: str, flat: list[dict[str, Any]]
    ) -> None:
        for spec in children:
            item = forward_item(spec, upper_id, chat_id, self._now_ms())
            if spec.get("sender_name"):
                self.user_names[item["sender"]["id"]] = spec["sender_name"]
            flat.append(item)
            self.forward_child[item["message_id"]] = item
            if item["msg_type"] == "merge_forward":
                start = len(flat)
                self._forward_level(item["message_id"], spec.get("children") or [], chat_id, flat)
                self.forwarded[item["message_id"]] = flat[start:]

    def add_resource(self, message_id: str, file_key: str, resource: Resource) -> None:
        with self.lock:
            self.resources[(message_id, file_key)] = resource

    def resource(self, message_id: str, file_key: str, kind: str | None) -> Resource:
        """GET message resource, with the documented refusals (get-message-resource: 234001/234003/234043)."""
        with self.lock:
            if kind not in ("image", "file"):
                raise FeishuError(234001)
            msg = self.by_id.get(message_id)
            if message_id in self.forward_child or (msg and msg["msg_type"] in ("merge_forward", "interactive")):
                raise FeishuError(234043)  # the docs: not for bundles, their children, or cards
            if msg is None:
                raise FeishuError(231003)
            found = self.resources.get((message_id, file_key))
            if found is None or found.kind != kind:
                raise FeishuError(234003)
            return found

    def list(self, query: dict[str, str]) -> dict[str, Any]:
        container_type, container_id = query.get("container_id_type"), query.get("container_id", "")
        size = page_size(query.get("page_size"))
        offset, sort = decode_page(query.get("page_token"), query.get("sort_type") or "ByCreateTimeAsc")
        with self.lock:
            if container_type == "chat":
                if container_id not in self.chats:
                    raise FeishuError(230002)
                items = [m for m in self.by_chat.get(container_id, []) if self._top_level(m)]
                items = time_filter(items, query.get("start_time"), query.get("end_time"))
            elif container_type == "thread":
                items = list(self.by_thread.get(container_id, []))
            else:
                raise FeishuError(99992402, "field validation failed: container_id_type is chat|thread")
            if sort == "ByCreateTimeDesc":
                items = items[::-1]
            page = copy.deepcopy(items[offset:offset + size])
        data: dict[str, Any] = {"has_more": offset + size < len(items), "items": page}
        if data["has_more"]:
            data["page_token"] = encode_page(offset + size, sort)
        return data

    def _top_level(self, msg: dict[str, Any]) -> bool:
        """A chat listing shows plain messages and topic roots, not the replies inside topics."""
        thread_id = msg.get("thread_id")
        return not thread_id or self.thread_roots.get(thread_id) == msg["message_id"]





def _peak(times: list[float], window: float) -> int:
    best = start = 0
    for end, t in enumerate(times):
        while t - times[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best
