"""The emulator's Bitable (多维表格): tables, records, cell formats, search filters and the item-side APIs (users,
chat members, card versions). In: the Bitable Open API requests the Feishu emulator routes here. Out: records."""
