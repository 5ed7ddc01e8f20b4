"""The Claude adapter. In: a request (system, messages, tools) a run wants answered. Out: the model's answer or
steps (streamed), usage, and its failures as our own errors (`core.errors`)."""
