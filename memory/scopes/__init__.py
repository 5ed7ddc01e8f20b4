"""Memory that outlives sessions, in a team: what each person asked of the assistant (`people/<open_id>`), what the
team agreed in a chat (`chats/<chat_id>`), where each item stands (`items/<item_id>`). In: the memory tool's commands
within what the batch's senders may touch, `/memory`, `/forget`, `/memory undo`, consolidation runs. Out: scopes in
Redis (versioned, capped, undoable), loaded into every turn within MEMORY_BUDGET_SHARE, a footer naming each change."""
