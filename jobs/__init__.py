"""Per-route runs on RQ: the inbox/lease protocol, the drain job, the turn, the outbox, the sweeper."""
