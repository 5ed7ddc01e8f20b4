"""The documents feature's reply texts (Chinese and English), said in the language of the message answered."""

from __future__ import annotations

from core.texts import Texts

TEXTS = Texts({
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
})
say = TEXTS.say
