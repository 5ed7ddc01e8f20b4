"""Delivery to another chat (issue 33): a person asks the assistant to post a result into another group chat —
`/share 运维群` or `同步到 运维群` (the route's last answer, or an item topic's first answer), or in words
("把结论同步到运维群": the model's `share_to_chat` tool, with the text it chose). Both go through one authorised path.
In: the command, the tool call, the answer kept. Out: a card in the target chat (who asked, from where, a link back to
the origin topic) and a reply in the origin carrying the link to what was posted, or a short refusal.

`spec` reads what was asked (pure); `access` decides it — the bot and the asker in the target chat now, the asker in
the origin now, at most SHARE_PER_PERSON_HOUR a person; `post` delivers it once; `card` draws it (pure); `part` is the
tool; `feature` declares it all; `standin` is its offline model.
"""
