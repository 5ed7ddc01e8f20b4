"""The offline Claude stand-in: the Messages API over HTTP (`ANTHROPIC_BASE_URL`), deterministic answers from
markers in the request, injectable faults and latencies."""
