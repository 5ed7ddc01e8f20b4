"""User-facing bot texts, short and in the user's language (Chinese by default)."""

from __future__ import annotations

import re

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN = re.compile(r"[A-Za-z]")

TEXTS = {
    "stream_abandoned": {
        "zh": "（这条回答没有写完。）",
        "en": "(This answer was not finished.)",
    },
    "dead_letter": {
        "zh": "抱歉，这条消息我多次处理都失败了，已经记录下来，管理员会跟进。",
        "en": "Sorry, I failed to handle this message several times. It has been logged for an admin to follow up.",
    },
    "empty_answer": {
        "zh": "抱歉，我这次没有生成回答，请换个说法再试一次。",
        "en": "Sorry, I could not produce an answer this time. Please try rephrasing.",
    },
    "reset_done": {
        "zh": "好的，已开启新会话，之前的对话不会再带入。",
        "en": "OK, a new session has started. Earlier conversation will not be carried over.",
    },
    "reset_done_shared": {
        "zh": "好的，已为本话题的所有人开启新会话，之前的对话不会再带入。",
        "en": "OK, a new session has started for everyone in this topic. "
              "Earlier conversation will not be carried over.",
    },
    "reset_dropped": {
        "zh": "重置前还没处理的 {n} 条消息不再回答，需要的话请重新发送。",
        "en": "{n} message(s) sent before the reset were not answered; please send them again if needed.",
    },
    "reset_followups": {
        "zh": "这里待发的 {n} 个跟进提醒已一并取消。",
        "en": "{n} pending follow-up(s) here were cancelled too.",
    },
    "reset_followups_told": {
        "zh": "{who} 你设的提醒（{what}）随重置取消了，需要的话请重新设。",
        "en": "{who} your follow-up ({what}) was cancelled by the reset; set it again if you still need it.",
    },
    "reset_followups_kept": {
        "zh": "同事设的 {n} 个跟进提醒仍保留（只有设提醒的人、事项负责人或提出人、管理员可以取消）。",
        "en": "{n} follow-up(s) colleagues set are kept (only whoever set one, the item's owner or reporter, "
              "or an admin may cancel it).",
    },
    "followups_none": {
        "zh": "这里没有待发的跟进提醒。",
        "en": "No pending follow-ups here.",
    },
    "followups_list": {
        "zh": "待发的跟进提醒（{n} 个）：\n{lines}\n取消：/cancel 编号",
        "en": "Pending follow-ups ({n}):\n{lines}\nTo cancel: /cancel <id>",
    },
    "followup_line": {
        "zh": "· {id} — {when}：{what}（{who}设）",
        "en": "· {id} — {when}: {what} (set by {who})",
    },
    "cancel_done": {
        "zh": "已取消提醒 {id}（{when}：{what}）。",
        "en": "Cancelled follow-up {id} ({when}: {what}).",
    },
    "cancel_done_other": {
        "zh": "已取消 {who} 设的提醒 {id}（{when}：{what}）。",
        "en": "Cancelled {who}'s follow-up {id} ({when}: {what}).",
    },
    "cancel_unknown": {
        "zh": "这里没有编号为 {id} 的待发提醒，发送 /followups 查看。",
        "en": "There is no pending follow-up {id} here. Send /followups to see them.",
    },
    "cancel_refused": {
        "zh": "只有设提醒的人、事项的负责人或提出人、管理员可以取消提醒 {id}。",
        "en": "Only whoever set follow-up {id}, the item's owner or reporter, or an admin may cancel it.",
    },
    "cancel_usage": {
        "zh": "用法：/cancel 提醒编号（发送 /followups 查看编号）。",
        "en": "Usage: /cancel <follow-up id> (send /followups to see them).",
    },
    "followup_set": {
        "zh": "（已设提醒：{when} · 编号 {id}）",
        "en": "(Follow-up set: {when} · id {id})",
    },
    "followup_set_for": {
        "zh": "（已为 {who} 设提醒：{when} · 编号 {id}）",
        "en": "(Follow-up set for {who}: {when} · id {id})",
    },
    "memory_changed": {
        "zh": "（记忆已更新：{what}）",
        "en": "(Memory updated: {what})",
    },
    "memory_refused_team_owner_unknown": {
        "zh": "（没有记入团队记忆：暂时查不到群主（应用缺少群信息权限 im:chat.group_info:readonly，或飞书没有响应），"
              "目前只有记忆管理员（MEMORY_ADMINS）可以修改。）",
        "en": "(Not kept in the team's memory: the chat's owner could not be looked up (the app lacks the group-info "
              "scope, or Feishu did not answer), so only a memory admin (MEMORY_ADMINS) may change it now.)",
    },
    "memory_refused_team": {
        "zh": "（没有记入团队记忆：只有群主或记忆管理员（MEMORY_ADMINS）可以修改团队的记忆。）",
        "en": "(Not kept in the team's memory: only the chat's owner or a memory admin (MEMORY_ADMINS) may change it.)",
    },
    "memory_none": {
        "zh": "这里我还没有记住什么。说“记住……”或“以后……”即可让我记下。",
        "en": "I remember nothing here yet. Say \"remember …\" to have me keep something.",
    },
    "memory_list": {
        "zh": "我在这里记得的（{n} 条）：\n{lines}\n删除：/forget 编号 或 /forget all；撤销上一次修改：/memory undo",
        "en": "What I remember here ({n}):\n{lines}\nTo delete: /forget <n> or /forget all; to undo the last change: "
              "/memory undo",
    },
    "memory_line": {
        "zh": "{n}. {whose} {path}：{first}（{updated}）",
        "en": "{n}. {whose} {path}: {first} ({updated})",
    },
    "memory_forgot": {
        "zh": "已删除：{whose} {path}。要恢复可发 /memory undo。",
        "en": "Deleted: {whose} {path}. To restore it: /memory undo.",
    },
    "memory_forgot_all": {
        "zh": "已删除你的全部记忆（{n} 个文件）。要恢复可发 /memory undo。",
        "en": "Deleted all your memory ({n} files). To restore it: /memory undo.",
    },
    "memory_forget_usage": {
        "zh": "用法：/forget 编号（发送 /memory 查看编号）或 /forget all。",
        "en": "Usage: /forget <n> (send /memory to see the numbers) or /forget all.",
    },
    "memory_forget_refused": {
        "zh": "只有群主或记忆管理员可以删除团队的记忆；事项的记忆由记忆管理员删除。",
        "en": "Only the chat's owner or a memory admin may delete the team's memory; an item's, a memory admin.",
    },
    "memory_undone": {
        "zh": "已撤销上一次修改（{what}）。",
        "en": "Undid the last change ({what}).",
    },
    "memory_nothing_to_undo": {
        "zh": "没有可以撤销的修改。",
        "en": "There is no change to undo.",
    },
    "memory_kept_on_reset": {
        "zh": "记忆不受影响（发送 /memory 查看）。",
        "en": "Memory stays as it was (send /memory to see it).",
    },
    "status": {
        "zh": "会话 {session_id}（上一个：{parent_id}）\n代数 {generation} · 已用 {tokens_in} 输入 / "
              "{tokens_out} 输出 tokens · {turns} 轮\n关联事项：{item_id}",
        "en": "Session {session_id} (previous: {parent_id})\nGeneration {generation} · {tokens_in} input / "
              "{tokens_out} output tokens used · {turns} turns\nLinked item: {item_id}",
    },
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
    "doc_refused": {
        "zh": "文档 {link} 需要查看权限：请文档所有者把提问的人加为协作者，或把链接设为组织内可阅读。"
              "这次回答没有用到它。",
        "en": "Document {link} needs view access: ask its owner to add you as a collaborator or to open the link "
              "to the organisation. This answer does not use it.",
    },
    "doc_not_shared": {
        "zh": "我还读不到文档 {link}：请在文档右上角「…」→「更多」→「添加文档应用」里添加本应用，然后再问我一次。",
        "en": "I cannot read document {link} yet: add this app via the document's \"…\" menu → More → Add document "
              "app, then ask again.",
    },
    "doc_not_found": {
        "zh": "文档 {link} 打不开：可能已删除，或链接有误。",
        "en": "Document {link} cannot be opened: it may have been deleted, or the link is wrong.",
    },
    "evidence": {
        "zh": "（依据：{parts}）",
        "en": "(Based on: {parts})",
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
}


def language_of(text: str) -> str:
    """'en' only for text with Latin letters and no CJK; Chinese otherwise."""
    if _CJK.search(text) or not _LATIN.search(text):
        return "zh"
    return "en"


def say(name: str, sample: str, **fields: object) -> str:
    """The text `name` in the language of `sample` (a slash command counts as Chinese, the default)."""
    lang = "zh" if sample.lstrip().startswith("/") else language_of(sample)
    text = TEXTS[name][lang]
    return text.format(**fields) if fields else text
