"""The ground every room stands on; it imports nothing of ours. Settings (one model from the flat env names),
our error types, log lines, metrics, the service clock, user-facing texts, Redis key builders, cron reading and the
neutral `Inbound` message that travels from the edge through the inbox to a run."""
