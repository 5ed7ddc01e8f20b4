"""Materials in a turn: the documents a batch links or its items' records list, wired to the run (documents/ does the
reading). In: the turn's batch and its items. Out: documents in the request within their share, the read_document
tool, and the evidence line of the reply."""
