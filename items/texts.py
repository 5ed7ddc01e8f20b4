"""The items feature's reply texts (Chinese and English), said in the language of the message answered."""

from __future__ import annotations

from core.texts import Texts

TEXTS = Texts({
    "status_item": {
        "zh": "\n记录：{record_link}\n首答：第 {version} 版 · {answer_status}",
        "en": "\nRecord: {record_link}\nFirst answer: version {version} · {answer_status}",
    },
    "item_registered": {
        "zh": "已登记为事项 {item_id}，首答正在生成，稍后会更新在卡片里。",
        "en": "Registered as item {item_id}. The first answer is being prepared and will appear in a card.",
    },
    "item_exists": {
        "zh": "这个话题已经是事项 {item_id}，不用重复登记。",
        "en": "This topic is already item {item_id}; no need to register it again.",
    },
    "item_linked": {
        "zh": "已把记录 {record_id} 关联到本话题（事项 {item_id}）。",
        "en": "Record {record_id} is now linked to this topic (item {item_id}).",
    },
    "item_link_conflict": {
        "zh": "没有关联：{why}",
        "en": "Not linked: {why}",
    },
    "item_link_refused": {
        "zh": "没有关联记录 {record_id}：只有它的负责人、提出人、来源群的成员或事项管理员可以关联。",
        "en": "Record {record_id} was not linked: only its owner, its reporter, members of its source chat or an "
              "item admin may link it.",
    },
    "item_needs_topic": {
        "zh": "请在话题里使用这个命令：一个话题对应一个事项。",
        "en": "Please use this command inside a topic: one topic is one item.",
    },
    "items_off": {
        "zh": "还没有配置多维表格，事项功能未开启。",
        "en": "No Bitable is configured, so item features are off.",
    },
    "items_create_off": {
        "zh": "事项登记已被管理员关闭（ITEM_CREATE_POLICY=off）。",
        "en": "Registering items is turned off by the admin (ITEM_CREATE_POLICY=off).",
    },
    "item_ref_refused": {
        "zh": "你引用的事项来自一个你不在的群，我不能在这里展示它的内容。",
        "en": "The item you referenced belongs to a chat you are not in, so I cannot show its content here.",
    },
    "evidence_version": {
        "zh": "首答第 {version} 版 · {status}",
        "en": "first answer version {version} · {status}",
    },
    "item_footer_version": {
        "zh": "（依据首答第 {version} 版 · {status}）",
        "en": "(Based on first answer version {version} · {status})",
    },
    "item_footer_pending": {
        "zh": "（首答分析仍在进行中，以上不含它的结论）",
        "en": "(The first-answer analysis is still in progress; the above does not include its findings)",
    },
    "item_footer_failed": {
        "zh": "（首答分析失败了，以上不含它的结论）",
        "en": "(The first-answer analysis failed; the above does not include its findings)",
    },
    "approval_refused": {
        "zh": "抱歉，只有这条记录的负责人、提出人或管理员可以审批这项修改。",
        "en": "Sorry, only the record's owner, its reporter or an admin can decide on this change.",
    },
    "approval_gone": {
        "zh": "这项审批已失效，记录没有改动。",
        "en": "This approval is no longer valid; the record was not changed.",
    },
})
say = TEXTS.say
