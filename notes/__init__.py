"""Notes the assistant saves while working (the save_note tool) and shows again in later turns of its memory scope
(`MEMORY_SCOPE`). In: the model's save_note calls. Out: notes in Redis (memory/notes.py), shown after the cached
system prefix."""
