"""Lua scripts of the inbox/lease protocol (design.md). Each state transition is one atomic script."""

# KEYS: seen_msg, seen_content, inbox, lease, dirty, kicks
# ARGV: event, kick_token, kick_ttl_ms, route_key, now, dedupe_ttl_s, kick_record
# Dedupe, append and kick are one step: a crash between them would lose the event and the
# redelivery would then be deduped away. The kick record is turned into an RQ job by the sweeper.
# A route holding a lease is always in `dirty` (only FINISH and an empty KICK remove it), so
# only the push that takes the lease needs to add it.
PUSH = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[6]) then return -1 end
if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[6]) then
  redis.call('DEL', KEYS[1])  -- it did not exist a moment ago: leave no trace of this duplicate
  return -1
end
redis.call('RPUSH', KEYS[3], ARGV[1])
if redis.call('SET', KEYS[4], 'k:' .. ARGV[2], 'NX', 'PX', ARGV[3]) then
  redis.call('ZADD', KEYS[5], 'NX', ARGV[5], ARGV[4])
  redis.call('RPUSH', KEYS[6], ARGV[7])
  return 1
end
return 0
"""

# KEYS: lease   ARGV: kick_token, exec_id, ttl_ms
ACQUIRE = """
local v = redis.call('GET', KEYS[1])
if (not v) or v == ('k:' .. ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""

# KEYS: inbox, proc, lease   ARGV: exec_id, ttl_ms
# A leftover proc list (from a crashed run) is retried as-is before new mail is taken.
TAKE = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
redis.call('PEXPIRE', KEYS[3], ARGV[2])
if redis.call('LLEN', KEYS[2]) == 0 and redis.call('LLEN', KEYS[1]) > 0 then
  redis.call('RENAME', KEYS[1], KEYS[2])
end
return redis.call('LRANGE', KEYS[2], 0, -1)
"""

# KEYS: proc, lease, transcript, attempts   ARGV: exec_id, ttl_ms, n, keep, batch_id, entries...
# The transcript is written in the same step that consumes the batch, so a retried batch can
# never be recorded twice.
COMMIT = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('LTRIM', KEYS[1], tonumber(ARGV[3]), -1)
for i = 6, #ARGV do redis.call('RPUSH', KEYS[3], ARGV[i]) end
local keep = tonumber(ARGV[4])
if keep > 0 then redis.call('LTRIM', KEYS[3], -keep, -1) else redis.call('DEL', KEYS[3]) end
redis.call('HDEL', KEYS[4], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
"""

# KEYS: inbox, proc, lease, dirty   ARGV: exec_id, route_key
# "Empty? then release" in one step: a push that lands after this sees no lease and kicks a run.
FINISH = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
if redis.call('LLEN', KEYS[1]) > 0 or redis.call('LLEN', KEYS[2]) > 0 then return 0 end
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[2])
return 1
"""

# KEYS: lease   ARGV: exec_id, ttl_ms
RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS: lease   ARGV: exec_id, kick_token, ttl_ms
# Hand the route to a (possibly delayed) successor run without letting anyone else in between.
HANDOVER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], 'k:' .. ARGV[2], 'PX', ARGV[3])
return 1
"""

# KEYS: inbox, proc, lease, dirty   ARGV: kick_token, ttl_ms, route_key
KICK = """
if redis.call('LLEN', KEYS[1]) == 0 and redis.call('LLEN', KEYS[2]) == 0 then
  if redis.call('EXISTS', KEYS[3]) == 0 then redis.call('ZREM', KEYS[4], ARGV[3]) end
  return -1
end
if redis.call('SET', KEYS[3], 'k:' .. ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""

# KEYS: proc, lease, dead_letters, attempts   ARGV: exec_id, record, batch_id
DEAD_LETTER = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('RPUSH', KEYS[3], ARGV[2])
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[4], ARGV[3])
return 1
"""
