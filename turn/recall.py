"""Chain of recall: read-only tools (thread pages, one message, older session history) and the tool loop.

Readable ≠ saved ≠ used: a message fetched from Feishu is only "included" once its whole text entered a
request; a spilled one (summary and id) or one left out for lack of room stays "pending". Each turn's
record (fetched, included, pending, the thread cursor) is stored in its assistant log entry, so the next
turn of the session continues where this one stopped. Within a request nothing is shown twice.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from claude import budget as bud
from claude.client import Completion, How, Step
from core.clock import iso
from core.errors import Paused, Permanent
from memory.sessions import END_USER_RESET
from runs.runtime import Runtime
from turn import rotation, tools
from turn.pages import Pages, add_once
from turn.registry import Context, Part, ToolRefused
from turn.rounds import kept_rounds
from turn.thread import (
    DATA_NOTE,
    RouteScope,
    get_message,
    in_context,
    message_part,
    part_close,
    part_open,
    render,
    text_of,
)

MAX_ROUNDS = 4  # tool rounds per turn; then the model must answer with what it has
MIN_ROOM = 150  # tokens: less than this left for a tool result and the model answers instead
RECORD_IDS = 200  # ids kept per list of a record

def tools_for(rt: Runtime, rk: str = "") -> list[dict[str, Any]]:
    """Every tool a request offers: one list for the deployment (turn/tools.py)."""
    return tools.tools_for(rt, rk)


@dataclass(frozen=True)
class Talk:
    completion: Completion  # the final answer, usage summed over the rounds, with the recall record and the rounds
    first: Completion  # the first request's usage alone (calibrates the estimate of the prepared request)


def last_record(rt: Runtime, rk: str, sid: str) -> dict[str, Any] | None:
    """The newest recall record of the session (or, across a rotation, of the session it continues)."""
    for _ in range(2):
        for raw in reversed(rt.state.lrange(rt.keys.session_log(rk, sid), -rotation.TAIL_ENTRIES, -1)):
            found = json.loads(raw).get("recall")
            if found:
                return dict(found)
        session = rt.sessions.get(rk, sid)
        if not session or session.boundary != "compression" or not session.parent_id:
            return None
        sid = session.parent_id
    return None


def reset_ms(rt: Runtime, rk: str, sid: str) -> int | None:
    """When the user last reset this conversation (ms), looking back through compressions and idle
    boundaries of the session chain; None when it was never reset."""
    sessions = {s.id: s for s in rt.sessions.all(rk)}
    seen: set[str] = set()
    session = sessions.get(sid)
    while session is not None and session.id not in seen:
        if session.boundary == END_USER_RESET:
            return int(session.started_at * 1000)
        seen.add(session.id)
        session = sessions.get(session.parent_id or "")
    return None


def converse(turn: Context, request: rotation.Request, messages: list[dict[str, Any]],
             on_text: Callable[[str], None] | None = None, parts: Mapping[str, Part] | None = None) -> Talk:
    """Ask, run the tools the model calls (at most MAX_ROUNDS), and ask again; every request within budget.
    `turn.session_id`: the session the request is in; `turn.previous`: the session's last recall record, when the
    caller has read it already (last_record). `request`: its system blocks and tools. `on_text`: each request is
    streamed and this sees its text so far (a streaming card, turn/stream.py). `parts`: the features' parts of the
    turn, which run their own tools (turn/registry.py)."""
    rt, system, offered = turn.rt, list(request.system), list(request.tools)
    b = rotation.budget_of(rt)
    reader = Reader(rt, turn.rk, turn.session_id, b, dict(turn.previous), parts)
    reader.unavailable = dict(request.unavailable)
    noted = _with_note(messages, reader.previous)
    if b.request_cost(system, noted, offered) <= b.total:  # the note never pushes a request over
        messages = noted
    steps: list[Step] = []
    start = len(messages) - 1  # the batch's message: history before it, this turn's rounds after it
    for n in range(MAX_ROUNDS + 1):
        room = b.input_room(b.request_cost(system, messages, offered))
        final = n == MAX_ROUNDS or room < MIN_ROOM or reader.full
        step = rt.llm.step(system, messages, offered, final=final, on_text=on_text, how=How(turn=start))
        reader.sent(messages)
        steps.append(step)
        if not step.tool_uses or final:
            break
        left = room - b.cost(json.dumps(step.content, ensure_ascii=False))
        results = reader.run(step.tool_uses, left, json.dumps(messages, ensure_ascii=False))
        while reader.full and _reading_only(step.tool_uses) and (shrunk := _room_made(messages, start)):
            # Not even one unseen message fitted: this turn's earlier results (each sent once already), then the
            # oldest history of this request make room, and the reading tools run again (read-only: running them
            # twice changes nothing but the page). What did not fit stays pending for the next read.
            messages, start = shrunk
            reader.full = False
            del reader.calls[-len(step.tool_uses):]
            left = b.input_room(b.request_cost(system, messages, offered)) - b.cost(json.dumps(step.content,
                                                                                                ensure_ascii=False))
            results = reader.run(step.tool_uses, left, json.dumps(messages, ensure_ascii=False))
        messages = [*messages, {"role": "assistant", "content": step.content}, {"role": "user", "content": results}]
    rounds = kept_rounds(messages[start + 1:], reader.private, b)  # the tool rounds as the history keeps them
    return Talk(completion=_total(steps, reader.record(), rounds), first=_total(steps[:1], None))


def _total(steps: Sequence[Step], record: dict[str, Any] | None, rounds: list[dict[str, Any]] | None = None
           ) -> Completion:
    last = steps[-1]
    return Completion(text=last.text, input_tokens=sum(s.input_tokens for s in steps),
                      output_tokens=sum(s.output_tokens for s in steps),
                      cache_read_tokens=sum(s.cache_read_tokens for s in steps), stop_reason=last.stop_reason,
                      recall=record, cache_creation_tokens=sum(s.cache_creation_tokens for s in steps),
                      rounds=rounds or None)


DROPPED = ('<earlier_result dropped="room"/> This result was read in an earlier round of this turn and left out '
           "to make room for the next read.")


READING = frozenset({"read_thread", "read_message", "read_history"})


def _reading_only(uses: Sequence[dict[str, Any]]) -> bool:
    return all(u.get("name") in READING for u in uses)


def _has_results(messages: Sequence[dict[str, Any]]) -> bool:
    return any(isinstance(m.get("content"), list) and any(isinstance(b, dict) and b.get("type") == "tool_result"
                                                          and b.get("content") != DROPPED for b in m["content"])
               for m in messages)


def _room_made(messages: list[dict[str, Any]], start: int) -> tuple[list[dict[str, Any]], int] | None:
    """`messages` with room made for a read (and where the batch's message now is): this turn's earlier tool
    results replaced by a marker, or else the oldest exchange of history left out of this request (the session's
    log keeps it); None when nothing is left to give. Pure."""
    if _has_results(messages[start:]):
        return messages[:start] + _earlier_results_dropped(messages[start:]), start
    cut = 2
    while cut < start and not _opens_exchange(messages[cut]):  # never a tool result without its call before it
        cut += 2
    if cut <= start and start >= 2:
        return messages[cut:], start - cut
    return None


def _opens_exchange(message: dict[str, Any]) -> bool:
    """A user message of people's words (not tool results): a request may start with it. Pure."""
    content = message.get("content")
    return message.get("role") == "user" and not (isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content))


def _earlier_results_dropped(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request with this turn's earlier tool results (each sent once already) replaced by a short marker. Pure."""
    def shrunk(block: Any) -> Any:
        if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("content") != DROPPED:
            return {**block, "content": DROPPED}
        return block

    return [{**m, "content": [shrunk(b) for b in m["content"]]} if isinstance(m.get("content"), list) else m
            for m in messages]


def _with_note(messages: list[dict[str, Any]], previous: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Tell the model where the last turn's reading stopped (its cursor, what is still pending)."""
    cursor = (previous or {}).get("cursor") or {}
    pending = (previous or {}).get("pending") or []
    if not (cursor.get("thread") or pending):
        return messages
    parts = ["<recall_state>"]
    if cursor.get("thread"):
        parts.append("An earlier turn read the thread partway; read_thread without a cursor (or with "
                     f'cursor="{html.escape(str(cursor["thread"]))}") continues there.')
    if pending:
        parts.append("Fetched earlier but not read whole (read_message): " + ", ".join(pending[:20]))
    parts.append("</recall_state>")
    note, content = "\n".join(parts), messages[-1]["content"]
    if isinstance(content, str):
        last = {**messages[-1], "content": content + "\n" + note}
    else:
        last = {**messages[-1], "content": [*content, {"type": "text", "text": note}]}
    return [*messages[:-1], last]


def request_text(messages: Sequence[dict[str, Any]]) -> str:
    """Every text a request carries (message strings, text blocks, tool results), joined. Pure."""
    out: list[str] = []
    for m in messages:
        content = m.get("content")
        blocks = [content] if isinstance(content, str) else content or []
        for block in blocks:
            if isinstance(block, str):
                out.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                out.append(block["text"])
            elif isinstance(block, dict) and isinstance(block.get("content"), str):
                out.append(block["content"])
    return "\n".join(out)


class Reader(Pages):
    """Runs the tools for one turn and keeps what it fetched, what entered a request, and the cursor."""

    def __init__(self, rt: Runtime, rk: str, sid: str, b: bud.Budget, previous: dict[str, Any] | None = None,
                 parts: Mapping[str, Part] | None = None) -> None:
        self.rt, self.rk, self.sid, self.b = rt, rk, sid, b
        self.scope = RouteScope.of(rk)
        self.previous = previous if previous is not None else last_record(rt, rk, sid)
        cursor = (self.previous or {}).get("cursor") or {}
        self.cursor: str | None = cursor.get("thread")
        self.has_more: bool | None = cursor.get("has_more")
        self.fetched: list[str] = []
        self.included: list[str] = []
        self.staged: dict[str, str] = {}  # id → its whole rendering in a tool result not yet sent
        self.calls: list[dict[str, Any]] = []
        self.crossed = False
        self.reset_ms = reset_ms(rt, rk, sid)  # messages sent before the user's reset stay out unless asked
        self.parts: Mapping[str, Part] = parts or {}  # the features' parts: their tools (turn/registry.py)
        self.full = False  # a read found no room left in the request: the model answers next
        self.unavailable: dict[str, str] = {}  # tools this turn may not use, and why (turn/tools.py)
        self.private: set[str] = set()  # tool_use ids whose results are this request's only (documents, memory)

    def sent(self, messages: Sequence[dict[str, Any]] = ()) -> None:
        """The request carrying the staged tool results went out: their messages are now used."""
        for mid in self.staged:
            add_once(self.included, mid)
        self.staged.clear()
        if self.parts:
            text = request_text(messages)
            for part in self.parts.values():
                part.sent(text)

    def record(self) -> dict[str, Any]:
        carried = [i for i in (self.previous or {}).get("pending") or [] if i not in self.included]
        pending = [i for i in self.fetched if i not in self.included]
        return {"fetched": self.fetched[:RECORD_IDS], "included": self.included[:RECORD_IDS],
                "pending": list(dict.fromkeys(pending + carried))[:RECORD_IDS],
                "cursor": {"thread": self.cursor, "has_more": self.has_more},
                "calls": self.calls, "crossed_reset": self.crossed,
                **{k: v for part in self.parts.values() for k, v in part.record().items()}}

    def run(self, uses: Sequence[dict[str, Any]], room: int, context: str) -> list[dict[str, Any]]:
        per = max(0, int(room * 0.8) // max(1, len(uses)))  # JSON framing of the results costs extra
        out = []
        for use in uses:
            raw = use.get("input")
            args: dict[str, Any] = raw if isinstance(raw, dict) else {}
            self.calls.append({"tool": use.get("name"), "input": args})
            try:
                text, error = self._dispatch(str(use.get("name")), args, per, context, str(use.get("id"))), False
            except ToolRefused as exc:  # a feature's tool said no (a memory path outside the batch's scopes …)
                text, error = str(exc), True
            except (Permanent, Paused) as exc:  # reading is optional: the model answers without it
                text, error = f"not available: {exc}", True
            text = self.b.fit_text(text, per)
            for mid, block in list(self.staged.items()):
                if block not in text and block not in context:  # cut by fit_text: not used after all
                    del self.staged[mid]
            context += text
            out.append({"type": "tool_result", "tool_use_id": use.get("id"), "content": text,
                        **({"is_error": True} if error else {})})
        return out

    def _dispatch(self, name: str, args: dict[str, Any], room: int, context: str, use_id: str = "") -> str:
        if name in self.unavailable:
            raise ToolRefused(f"not available here: {self.unavailable[name]}")
        if name == "read_thread":
            return self._thread(args, room, context)
        if name == "read_message":
            offset = args.get("offset")
            return self._message(str(args.get("message_id") or ""), room, context,
                                 offset if isinstance(offset, int) and offset > 0 else 0)
        if name == "read_history":
            return self._history(args, room)
        for part in self.parts.values():
            result = part.call(name, args, room)
            if result is not None:
                if not part.keeps(name):
                    self.private.add(use_id)
                return result
        raise ToolRefused(f"not available here: no tool named {name!r} in this conversation")

    # -- tools -------------------------------------------------------------------------------------------

    def _message(self, mid: str, room: int, context: str, offset: int = 0) -> str:
        if not offset and (in_context(mid, context) or mid in self.staged):
            return f'<already_in_context ref="{html.escape(mid)}"/> Its whole text is above.'
        item = get_message(self.rt.feishu, mid) if mid else None
        if item is None or not self.scope.allows(item):
            raise ToolRefused("No such message in this conversation.")  # a tool error (is_error)
        add_once(self.fetched, mid)
        if offset:
            return self._message_from(item, mid, offset, room)
        xml, _ = render(item, inline_chars=10**9, tz=self.rt.settings.tz)
        if self.b.cost(xml) + 20 > room:
            return self._message_from(item, mid, 0, room)
        self.staged[mid] = xml
        return f"{DATA_NOTE}\n{xml}"

    def _message_from(self, item: dict[str, Any], mid: str, offset: int, room: int) -> str:
        """The message's text from `offset`, as much as fits; says where to read on."""
        text = text_of(item)[offset:]
        head = f"{DATA_NOTE}\n" + part_open(mid, offset)
        cut = self.b.prefix_that_fits(text, room - self.b.cost(head) - 10, lambda c: part_close(text, offset, c))
        return f"{DATA_NOTE}\n" + message_part(mid, text, offset, cut)

    def _history(self, args: dict[str, Any], room: int) -> str:
        chain = self._chain()
        if not chain:
            return "No older sessions in this conversation."
        wanted = str(args.get("session_id") or "")
        target, crosses = next(((s, c) for s, c in chain if s.id == wanted), chain[0])
        if crosses and not args.get("cross_reset"):
            return ("That history lies before a user reset, a hard boundary. Read it only if the user explicitly "
                    "asks for pre-reset history: then call read_history with cross_reset=true.")
        self.crossed = self.crossed or crosses
        entries = self.rt.sessions.log(self.rk, target.id)[::-1]  # newest first
        offset = max(0, int(args.get("offset") or 0))
        warn = (" CROSSES A USER RESET: this is history from before the user reset the conversation; use it only "
                "for what the user explicitly asked.") if crosses else ""
        older = ",".join(s.id for s, _ in chain)
        head = (f'<session_history session_id="{target.id}" end_reason="{target.end_reason or ""}" '
                f'crosses_user_reset="{str(crosses).lower()}" older_sessions="{older}">\n{DATA_NOTE}{warn}')
        parts, used, n = [head], self.b.cost(head) + 40, offset
        for e in entries[offset:]:
            text = str(e.get("text"))  # a batch is markup already (escaped once): only an answer's Markdown is escaped
            body = text if e.get("role") == "user" else html.escape(text, quote=False)
            at = iso(float(e["at"]), self.rt.settings.tz) if e.get("at") else ""
            xml = f'<history_entry role="{e.get("role")}" at="{at}">\n{body}\n</history_entry>'
            if used + self.b.cost(xml) > room:
                break
            parts.append(xml)
            used += self.b.cost(xml)
            add_once(self.fetched, f"{target.id}#{n}")
            self.staged[f"{target.id}#{n}"] = xml
            n += 1
        more = f' next_offset="{n}"' if n < len(entries) else ""
        return "\n".join(parts) + f"\n<end{more}/>\n</session_history>"

    def _chain(self) -> list[tuple[Any, bool]]:
        """The sessions before the current one, newest first, each with whether reaching it crosses a reset."""
        sessions = {s.id: s for s in self.rt.sessions.all(self.rk)}
        out, cur, crossed = [], sessions.get(self.sid), False
        while cur is not None and cur.parent_id and cur.parent_id in sessions:
            crossed = crossed or cur.boundary == END_USER_RESET
            cur = sessions[cur.parent_id]
            out.append((cur, crossed))
        return out

