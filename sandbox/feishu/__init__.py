"""The Feishu Open Platform emulator: IM messages, cards and CardKit, reactions, the long connection, and the event
builders that sign what Feishu pushes; Bitable (sandbox/bitable) and documents (sandbox/documents) are rooms of
their own it routes to. lark-oapi talks to it over HTTP (`FEISHU_DOMAIN`)."""
