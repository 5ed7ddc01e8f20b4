"""The Feishu Open API adapter. In: what a run wants to say or read. Out: lark-oapi requests, and their failures as
our own errors (`core.errors`).

`client` is the lark-oapi face (replies, reactions, reads, token cache); `render` and `cards` build message content;
`content` renders received content for the model; `materials` fetches what a message showed; `identity` caches the
bot's own open_id.
"""
