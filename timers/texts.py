"""The timers feature's reply texts (Chinese and English), said in the language of the message answered."""

from __future__ import annotations

from core.texts import Texts

TEXTS = Texts({
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
})
say = TEXTS.say
