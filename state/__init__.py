"""Redis plumbing every process stands on. In: a REDIS_URL (or Sentinel addresses, or nothing: the embedded server
under var/). Out: clients (`store`), the embedded server (`embedded`), durability across a failover (`ha`,
`store.ReplicaWait`) and the web's shared round trips (`groupcommit`). Knows no key and no feature."""
