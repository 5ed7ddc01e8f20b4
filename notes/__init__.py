"""Notes the old `save_note` tool kept (per MEMORY_SCOPE), shown after the cached system prefix until migrated into
memory scopes (`python -m memories.migrate`). In: nothing new. Out: the old notes, read only."""
