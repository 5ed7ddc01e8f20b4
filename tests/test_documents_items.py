"""An item's materials (issue 15, acceptance 7): the documents its record lists enter every follow-up in its
topic, each with its revision, read fresh with the record; a document taken out of the record leaves the next
request. Runs on the items rig of tests/test_items.py; the materials column is added to its table here only
(every other items test runs on a table without it: the column is optional)."""

from __future__ import annotations

from typing import Any

from sandbox.bitable.tables import TEXT, _field
from tests.harness import model_requests_with, reply_text
from tests.test_documents import link, text_of
from tests.test_items import (  # noqa: F401  (_table and rig: the items rig and its table, as fixtures)
    APP,
    TABLE,
    _table,
    follow_up,
    open_topic,
    rig,
)


def _sent(claude: Any, marker: str) -> str:
    return text_of(model_requests_with(claude, marker)[0])


def test_record_materials_enter_follow_ups_with_revisions_and_leave_when_removed(rig, feishu, claude,  # noqa: F811
                                                                                   r) -> None:
    web, keys, _ = rig
    feishu.bitable.add_table(APP, TABLE).fields.append(_field("材料链接", TEXT, False))
    # Closed documents nobody was made a collaborator of: only "it is in the item's record" lets them in.
    guide = feishu.add_doc("导出失败排查", "## 结论\nCANARY-MAT-A1 缓存未刷新。")
    impact = feishu.add_doc("客户影响清单", "## 客户\nCANARY-MAT-B1")
    feishu.edit_doc(impact, "## 客户\nCANARY-MAT-B2 三个客户。")  # revision 2
    chat, thread, root, item = open_topic(web, feishu, r, keys)
    feishu.edit_record(APP, TABLE, item.record_id, {"材料链接": f"{link('docx', guide)}\n{link('docx', impact)}"})
    _env, reply = follow_up(web, feishu, chat, thread, root, "@_user_1 根据材料看看原因（一）")
    first = _sent(claude, "根据材料看看原因（一）")
    assert "CANARY-MAT-A1" in first and "CANARY-MAT-B2" in first and "CANARY-MAT-B1" not in first
    assert 'title="导出失败排查" document="' + guide + '" kind="docx" revision="1"' in first
    assert 'title="客户影响清单" document="' + impact + '" kind="docx" revision="2"' in first
    said = reply_text(reply)
    assert "《导出失败排查》r1" in said and "《客户影响清单》r2" in said and "首答第 3 版" in said
    feishu.edit_record(APP, TABLE, item.record_id, {"材料链接": link("docx", guide)})
    follow_up(web, feishu, chat, thread, root, "@_user_1 根据材料再看看（二）")
    second = _sent(claude, "根据材料再看看（二）")
    assert f'document="{guide}" kind="docx" revision="1"' in second  # still there, on this small budget in part
    assert "CANARY-MAT-B2" not in second and impact not in second
