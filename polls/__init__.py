"""Polls: `/poll 问题 | 选项A | 选项B [| 截止 18:00]` in a group posts a card whose buttons take one vote per person
(changeable until it closes); it closes at the time said or after POLL_DEFAULT_HOURS and posts the result.
In: the command, clicks on its buttons (`polls:vote`), its closing timer. Out: the card, patched as votes come, and
the result. Its state: one hash per poll and one of its votes, under the feature's own keys, bounded and expiring.

`spec` reads the command (pure); `store` keeps polls and votes; `card` draws it (pure); `feature` declares it all.
"""
