"""What one turn does. In: a batch of a route's inbox (parsed messages) and the route's session.
Out: one fenced reply in the right place, the session log extended (rotated when it no longer fits), progress shown.

`answer` runs the turn; `session` finds the route's session and answers `/reset` and `/status`; `rotation` fits the
request into the budget; `recall` and `thread` are the read-only tools; `bootstrap` seeds a topic; `batch_content`
fetches what messages showed; `stream` grows the answer in a card; `progress` shows reactions.
"""
