"""The emulator's message reactions: add, remove and list, with the real response shapes and a timed log."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sandbox.feishu.rules import FeishuError, page_size
from sandbox.server import new_id

# A subset of Feishu's emoji_type names (open.feishu.cn "表情文案说明"); anything else answers 231001.
EMOJI_TYPES = frozenset({
    "OK", "THUMBSUP", "THANKS", "MUSCLE", "FINGERHEART", "APPLAUSE", "FISTBUMP", "JIAYI", "DONE", "SMILE",
    "BLUSH", "LAUGH", "LOVE", "WOW", "CRY", "HEART", "Get", "LGTM", "OnIt", "Typing", "CrossMark", "CheckMark",
    "Yes", "No", "ERROR", "SaluteFace", "OneSecond", "Hourglass", "Fire", "PARTY",
})
REACTION_ERRORS = {
    231001: "The reaction type is invalid.",
    231002: "The operator has no permission to react on the specific message.",
    231003: "The message is not found, maybe not exist or deleted.",
    231010: "The reaction does not exist.",  # code approximate: the docs name the case, not its number
}


class Reactions:
    """Mixed into FeishuStore: state lives there (`reactions`, reset in FeishuStore.reset), under its lock."""

    if TYPE_CHECKING:
        lock: threading.RLock
        app_id: str
        clock: Callable[[], float]
        by_id: dict[str, dict[str, Any]]
        reactions: dict[str, list[dict[str, Any]]]

    def add_reaction(self, message_id: str, body: Any) -> dict[str, Any]:
        """POST /im/v1/messages/:message_id/reactions {reaction_type: {emoji_type}} → the reaction."""
        emoji = ((body or {}).get("reaction_type") or {}).get("emoji_type") if isinstance(body, dict) else None
        with self.lock:
            self._reactable(message_id)
            if emoji not in EMOJI_TYPES:
                raise FeishuError(231001, REACTION_ERRORS[231001])
            now = self.clock()
            shown = {"reaction_id": new_id("", 24), "operator": {"operator_id": self.app_id, "operator_type": "app"},
                     "action_time": str(int(now * 1000)), "reaction_type": {"emoji_type": emoji}}
            self.reactions.setdefault(message_id, []).append(
                {**shown, "added_at": time.time(), "removed_at": None})
            return shown

    def remove_reaction(self, message_id: str, reaction_id: str) -> dict[str, Any]:
        """DELETE …/reactions/:reaction_id → the removed reaction (only one that is there, and the app's own)."""
        with self.lock:
            self._reactable(message_id)
            found = next((r for r in self.reactions.get(message_id, [])
                          if r["reaction_id"] == reaction_id and r["removed_at"] is None), None)
            if found is None:
                raise FeishuError(231010, REACTION_ERRORS[231010])
            if found["operator"]["operator_id"] != self.app_id:
                raise FeishuError(231002, REACTION_ERRORS[231002])
            found["removed_at"] = time.time()
            return _shown(found)

    def list_reactions(self, message_id: str, query: dict[str, str]) -> dict[str, Any]:
        """GET …/reactions?reaction_type=&page_size= (one page; the emulator never has more than fit)."""
        with self.lock:
            self._reactable(message_id)
            wanted = query.get("reaction_type")
            live = [_shown(r) for r in self.reactions.get(message_id, []) if r["removed_at"] is None
                    and (not wanted or r["reaction_type"]["emoji_type"] == wanted)]
            return {"items": live[:page_size(query.get("page_size"))], "has_more": False, "page_token": ""}

    def reaction_log(self, message_id: str | None = None) -> list[dict[str, Any]]:
        """Every reaction ever added (removed ones too), with `message_id`, `added_at` and `removed_at` (epoch s)."""
        with self.lock:
            ids = [message_id] if message_id is not None else list(self.reactions)
            return [{**copy.deepcopy(r), "message_id": m} for m in ids for r in self.reactions.get(m, [])]

    def _reactable(self, message_id: str) -> None:
        msg = self.by_id.get(message_id)
        if msg is None or msg.get("deleted"):
            raise FeishuError(231003, REACTION_ERRORS[231003])


def _shown(r: dict[str, Any]) -> dict[str, Any]:
    return {k: copy.deepcopy(v) for k, v in r.items() if k not in ("added_at", "removed_at")}
