"""The memory feature's reply texts (Chinese and English), said in the language of the message answered."""

from __future__ import annotations

from core.texts import Texts

TEXTS = Texts({
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
})
say = TEXTS.say
