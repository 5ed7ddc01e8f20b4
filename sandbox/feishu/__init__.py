"""The Feishu Open Platform emulator: Open API, Bitable, cards, reactions, the long connection, and the event
builders that sign what Feishu pushes. lark-oapi talks to it over HTTP (`FEISHU_DOMAIN`)."""
