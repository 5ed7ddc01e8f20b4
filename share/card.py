"""The card a delivery posts into the target chat: the result, who asked for it and from where, a link back. Pure.

JSON 2.0 like every card of ours. The result is the model's or an answer's Markdown, defused like a reply's (no
mention, no `<at id=all>`, at most MARKDOWN_TABLES_MAX tables, clipped to SHARE_MAX_CHARS); the only real mention is
the asker's, from the id Feishu gave us; chat names are made inert; the link is one we built or Feishu returned.
"""

from __future__ import annotations

from typing import Any

from lark_oapi.channel.card import new_card

from bitable.refs import SAFE_LINK
from feishu.cardmd import MARKDOWN_TABLES_MAX, before_table
from feishu.cards import OPEN_ID, clip
from feishu.render import card_markdown
from share.texts import TEXTS


def share_card(*, body: str, asker: str, origin: str, link: str, max_chars: int, sample: str) -> dict[str, Any]:
    """`origin`: where it came from, already inert ("「研发群」的话题"); `link`: back to it ("" = none)."""
    card = new_card().config(update_multi=True, width_mode="fill")
    card.header(TEXTS.say("card_title", sample, origin=origin)[:100], template="blue")
    card.markdown(card_markdown(before_table(clip(body.strip(), max_chars), MARKDOWN_TABLES_MAX)))
    card.divider()
    who = f"<at id={asker}></at>" if OPEN_ID.fullmatch(asker) else TEXTS.say("someone", sample)
    line = TEXTS.say("card_by", sample, who=who, origin=origin)
    if SAFE_LINK.fullmatch(link or ""):
        line += f" · [{TEXTS.say('card_link', sample)}]({link})"
    card.raw({"tag": "markdown", "element_id": "footer", "text_size": "notation", "content": line})
    return card.to_dict()
