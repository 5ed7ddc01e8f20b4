"""Memory scopes (issue 25): paths and grants (pure tables), the store on the real Redis (versions, caps, undo,
racing writers), and the memory tool backend's commands within a turn's grant."""

from __future__ import annotations

import threading

import pytest
import redis

from core.keys import Keys
from memory.scopes.paths import Grant, PathError, Scope, grant, parse
from memory.scopes.store import Caps, Memories, MemoryFull
from memory.scopes.tool import ScopedMemory
from tests.harness import unique

ALICE, BOB = Scope("people", "ou_alice"), Scope("people", "ou_bob")
CHAT, ITEM = Scope("chats", "oc_team"), Scope("items", "itm_0123456789ab")
CAPS = Caps(files=20, chars=100_000, file_chars=8000)


@pytest.mark.parametrize("path", [
    "/memories/people/ou_alice/../ou_bob/x.md", "/memories/people/ou_alice/./x.md", "/memories/people/ou_alice//x.md",
    "/memories/people/ou_alice/%2e%2e/x.md", "/memories/people/ou_alice/%252e%252e/x",
    "/memories/people/ou_alice/．．/x",
    "/etc/passwd", "memories/people/ou_alice/x.md", "/memoriesx/people/ou_alice", "/memories/people/ou_alice\\..\\x",
    "/memories/secrets/x", "/memories/people/../../etc", "/memories/people/ou_alice/x\x00.md", "", 42,
    "/memories/chats/not-a-chat/x.md", "/memories/people/ou_alice/a/b/c/d/e/f.md",
])
def test_paths_that_escape_or_do_not_name_a_scope_are_refused(path: object) -> None:
    with pytest.raises(PathError):
        parse(path)


def test_paths_name_a_scope_and_a_file() -> None:
    w = parse("/memories/people/ou_alice/notes/roles.md")
    assert (w.scope, w.file) == (ALICE, "notes/roles.md")
    assert parse("/memories").scope is None and parse("/memories/chats").kind == "chats"
    assert parse("/memories/items/itm_0123456789ab/").file == ""
    assert parse("/memories/chats/oc_team/团队约定.md").file == "团队约定.md"


def test_a_batch_grants_its_senders_its_chat_to_read_and_its_item() -> None:
    g = grant(["ou_alice", "ou_bob"], "oc_team", "group", "itm_0123456789ab", chat_writers=set())
    assert g.read == {ALICE, BOB, CHAT, ITEM} and g.write == {ALICE, BOB, ITEM}
    with pytest.raises(PathError, match=r"read-only here.*owner"):
        g.check(parse("/memories/chats/oc_team/rules.md"), writing=True)
    denied = [str(_err(g, f"/memories/people/ou_carol/{f}")) for f in ("x.md", "instructions.md")]
    assert denied[0].replace("x.md", "") == denied[1].replace("instructions.md", "")  # says nothing of what is there
    assert "ou_carol" in denied[0] and "not one of the memory scopes" in denied[0]
    owner = grant(["ou_owner"], "oc_team", "group", "", chat_writers={"ou_owner"})
    assert CHAT in owner.write
    private = grant(["ou_alice"], "oc_dm", "p2p", "", chat_writers={"ou_alice"})
    assert private.read == {ALICE}  # a private chat has no team memory: the person's own is theirs


def _err(g: Grant, path: str) -> Exception:
    try:
        g.check(parse(path), writing=False)
    except PathError as exc:
        return exc
    raise AssertionError("not refused")


@pytest.fixture()
def store(r: redis.Redis) -> Memories:
    return Memories(r, Keys(unique("mem")), CAPS)


def test_writes_are_versioned_capped_and_undone_five_deep(store: Memories) -> None:
    for n in range(7):
        store.change(ALICE, "ou_alice", f"v{n}", lambda files, n=n: {"instructions.md": f"第{n}版"})
    assert store.file(ALICE, "instructions.md").text == "第6版"  # type: ignore[union-attr]
    assert store.version(ALICE) == 7 and store.undoable(ALICE) == 5
    for n in (5, 4, 3, 2, 1):
        assert store.undo(ALICE, "ou_alice") is not None
        assert store.file(ALICE, "instructions.md").text == f"第{n}版"  # type: ignore[union-attr]
    assert store.undo(ALICE, "ou_alice") is None  # the last five only
    assert store.version(ALICE) == 12  # undo moves the version on too (every writer's compare-and-set sees it)
    big = Caps(files=2, chars=10, file_chars=8)
    small = Memories(store.r, store.k, big)
    with pytest.raises(MemoryFull, match="at most 8"):
        small.change(BOB, "ou_bob", "x", lambda f: {"a.md": "123456789"})
    small.change(BOB, "ou_bob", "x", lambda f: {"a.md": "12345"})
    with pytest.raises(MemoryFull, match="more than 10 characters"):
        small.change(BOB, "ou_bob", "x", lambda f: {"b.md": "123456"})
    small.change(BOB, "ou_bob", "x", lambda f: {"b.md": "12"})
    with pytest.raises(MemoryFull, match="2 files"):
        small.change(BOB, "ou_bob", "x", lambda f: {"c.md": "1"})
    small.change(BOB, "ou_bob", "x", lambda f: {"a.md": None})  # a delete frees room
    small.change(BOB, "ou_bob", "x", lambda f: {"c.md": "1"})


def test_racing_writers_lose_nothing(store: Memories) -> None:
    """Twelve threads append a line each to one file, twenty times: every line is there once."""
    def append(n: int) -> None:
        for i in range(20):
            store.change(CHAT, f"ou_{n}", "append", lambda f, n=n, i=i: {
                "log.md": (f["log.md"].text + "\n" if "log.md" in f else "") + f"{n}-{i}"})

    threads = [threading.Thread(target=append, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    lines = store.file(CHAT, "log.md").text.split("\n")  # type: ignore[union-attr]
    assert sorted(lines) == sorted(f"{n}-{i}" for n in range(12) for i in range(20))
    assert store.version(CHAT) == 240


def test_the_tool_reads_and_writes_only_within_the_grant(store: Memories) -> None:
    g = grant(["ou_alice"], "oc_team", "group", "itm_0123456789ab", chat_writers=set())
    store.change(BOB, "ou_bob", "x", lambda f: {"instructions.md": "Bob 的秘密偏好"})
    tool = ScopedMemory(store, g, "ou_alice")
    out, err = tool.run({"command": "create", "path": "/memories/people/ou_alice/instructions.md",
                         "file_text": "以后回答我用英文，简短点"})
    assert not err and "created" in out
    out, err = tool.run({"command": "str_replace", "path": "/memories/people/ou_alice/instructions.md",
                         "old_str": "简短点", "new_str": "简短一点"})
    assert not err and "简短一点" in out
    out, err = tool.run({"command": "view", "path": "/memories/people/ou_bob/instructions.md"})
    assert err and "Bob" not in out and "秘密" not in out
    out, err = tool.run({"command": "view", "path": "/memories"})
    assert not err and "ou_bob" not in out and "39B\t/memories/people/ou_alice/" in out.split("\n")  # 2 levels
    out, err = tool.run({"command": "create", "path": "/memories/chats/oc_team/rules.md", "file_text": "x"})
    assert err and "owner" in out
    out, err = tool.run({"command": "create", "path": "/memories/people/ou_alice/../ou_bob/x.md", "file_text": "x"})
    assert err and "escape" in out
    out, err = tool.run({"command": "insert", "path": "/memories/items/itm_0123456789ab/progress.md",
                         "insert_line": 0, "insert_text": "x"})
    assert err and "does not exist" in out
    tool.run({"command": "create", "path": "/memories/items/itm_0123456789ab/progress.md", "file_text": "已确认：月底"})
    out, err = tool.run({"command": "insert", "path": "/memories/items/itm_0123456789ab/progress.md",
                         "insert_line": 1, "insert_text": "待查：索引"})
    assert not err and store.file(ITEM, "progress.md").text == "已确认：月底\n待查：索引\n"  # type: ignore[union-attr]
    assert [c[1] for c in tool.changed] == ["instructions.md", "instructions.md", "progress.md", "progress.md"]
    assert store.file(BOB, "instructions.md").text == "Bob 的秘密偏好"  # type: ignore[union-attr]


# -- moving the retired save_note notes in (memory/scopes/migrate.py) ------------------------------------------------

def test_old_notes_move_into_their_scopes_once_and_the_deployment_wide_ones_stay(r: redis.Redis) -> None:
    from memory.notes import Notes
    from memory.scopes.migrate import PREFIX, migrate

    keys = Keys(unique("mig"))
    store = Memories(r, keys, Caps(files=20, chars=100_000, file_chars=120))
    notes = Notes(r, keys)
    group_rk, dm_rk = f"feishu:{keys.profile}:group:oc_team:ou_a", f"feishu:{keys.profile}:p2p:oc_dm"
    for n in range(4):
        notes.save("chat:oc_team", f"群里的第{n}条：发版窗口是周四下午，需要提前一天在群里报备", by="ou_a",
                   route_key=group_rk)
    notes.save("chat:oc_dm", "我的周报发给王经理", by="ou_dm", route_key=dm_rk)
    notes.save("user:ou_u", "偏好表格形式", by="ou_u", route_key=dm_rk)
    notes.save("all", "全公司的约定", by="ou_a", route_key=group_rk)
    dry = migrate(r, keys, store, None, dry_run=True)
    assert any("dry run" in line for line in dry) and not store.scopes()
    said = migrate(r, keys, store, None, dry_run=False)
    team = store.files(CHAT)
    assert len(team) >= 2 and all(p.startswith(PREFIX) and len(f.text) <= 120 for p, f in team.items())
    shown = "\n".join(f.text for _, f in sorted(team.items()))
    assert [shown.count(f"第{n}条") for n in range(4)] == [1, 1, 1, 1] and shown.index("第0条") < shown.index("第3条")
    assert "王经理" in store.files(Scope("people", "ou_dm"))[f"{PREFIX}1.md"].text  # a private chat's: its person's
    assert "表格" in store.files(Scope("people", "ou_u"))[f"{PREFIX}1.md"].text
    assert any("全公司的约定" in line and "TEAM_NOTES_FILE" in line for line in said)
    assert notes.newest("chat:oc_team") == [] and [n["text"] for n in notes.newest("all")] == ["全公司的约定"]
    version = store.version(CHAT)
    again = migrate(r, keys, store, None, dry_run=False)  # nothing left to move: nothing doubles
    assert store.version(CHAT) == version and not any("oc_team" in line for line in again)
    # a crash after the write and before the delete: the next run writes the same files, no note twice
    notes.save("chat:oc_team2", "崩溃前写入的", by="ou_a", route_key=group_rk)
    two = Scope("chats", "oc_team2")
    migrate(r, keys, store, None, dry_run=False)
    notes.save("chat:oc_team2", "崩溃前写入的", by="ou_a", route_key=group_rk)  # as if the delete never happened
    migrate(r, keys, store, None, dry_run=False)
    assert [f.text.count("崩溃前写入的") for f in store.files(two).values()] == [1]


def test_a_retried_turn_writing_again_remembers_each_line_once_and_names_no_change(store: Memories) -> None:
    """A turn killed after its write and before its reply runs again: the same create or insert must not double."""
    g = grant(["ou_alice"], "oc_team", "group", "itm_0123456789ab", chat_writers=set())
    path = "/memories/items/itm_0123456789ab/progress.md"
    create = {"command": "create", "path": path, "file_text": "已确认：月底"}
    insert = {"command": "insert", "path": path, "insert_line": 1, "insert_text": "待查：索引\n"}
    for attempt in range(2):
        tool = ScopedMemory(store, g, "ou_alice")
        out, err = tool.run(create)
        assert not err, out
        assert bool(tool.changed) is (attempt == 0)  # the retry changed nothing, so its footer names nothing
    for attempt in range(2):
        tool = ScopedMemory(store, g, "ou_alice")
        out, err = tool.run(insert)
        assert not err, out
        assert bool(tool.changed) is (attempt == 0)
    assert store.file(ITEM, "progress.md").text == "已确认：月底\n待查：索引\n"  # type: ignore[union-attr]
    assert store.version(ITEM) == 2
    out, err = ScopedMemory(store, g, "ou_alice").run({"command": "create", "path": path, "file_text": "别的"})
    assert err and "already exists" in out  # a different text is still refused
