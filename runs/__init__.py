"""What a run stands on. In: a route's events (pushed by the edge and by timers). Out: the run's footing — this
process's adapters (`runtime`), the route's inbox and lease (`inbox`, its Lua in `inbox_lua`), RQ queues (`queues`),
the fenced, paced outbox (`outbox`), graceful stop (`shutdown`) and admin alerts (`alerts`)."""
