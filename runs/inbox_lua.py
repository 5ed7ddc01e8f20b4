"""Lua scripts of the inbox/lease protocol (design.md). Each state transition is one atomic script.

Lease values: absent = free; `k:<token>` = a run is queued (any drain job of the route may take it);
`d:<token>` = a retry waits out its backoff (only the job of that token may take it); anything else
= the execution id of the run that owns the route.

Invariants (checked by tests/test_protocol.py against real Redis):
- every route whose lease is held, by anyone, is in `dirty` (each script that creates a lease adds it);
- every route with events in `inbox` or `proc` is in `dirty`;
- an event leaves `proc` only in COMMIT, which records it in the session log or the dead letters (or, when
  a user reset overtook its turn or it was sent before one, consumes it without a record).
"""

# KEYS: seen_msg, seen_content, inbox, lease, dirty, kicks, metrics, route, sessions
# ARGV: event, kick_token, kick_ttl_ms, route_key, now, dedupe_ttl_s, kick_record,
#       reset_sid ('' = not a reset), session_log_prefix, retention_s
# Dedupe, append and kick are one step: a crash between them would lose the event and the
# redelivery would then be deduped away. Each stored event gets the route's generation as its JSON
# object's last member. A user reset takes effect here, when it is accepted: the generation moves on
# (fencing every run that began before it), the current session ends as `user_reset`, and the route
# points to a new, empty session. The route indexes (the console's lookups) are not written here: the run that
# takes the event writes them (Inbox.index), so no webhook request pays for them (issue 32).
PUSH = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[6]) then
  redis.call('HINCRBY', KEYS[7], 'dedupe_hits', 1)
  return -1
end
if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[6]) then
  redis.call('DEL', KEYS[1])  -- it did not exist a moment ago: leave no trace of this duplicate
  redis.call('HINCRBY', KEYS[7], 'dedupe_hits', 1)
  return -1
end
local gen = tonumber(redis.call('HGET', KEYS[8], 'gen') or '0')
if ARGV[8] ~= '' then
  local now = tonumber(ARGV[5])
  gen = redis.call('HINCRBY', KEYS[8], 'gen', 1)
  local old = redis.call('HGET', KEYS[8], 'sid')
  local rec = {id = ARGV[8], route_key = ARGV[4], parent_id = cjson.null, end_reason = cjson.null,
               generation = gen, started_at = now, ended_at = cjson.null, boundary = 'user_reset'}
  if old then
    rec.parent_id = old
    local raw = redis.call('HGET', KEYS[9], old)
    if raw then
      local prev = cjson.decode(raw)
      prev.end_reason = 'user_reset'
      prev.ended_at = now
      redis.call('HSET', KEYS[9], old, cjson.encode(prev))
    end
    if tonumber(ARGV[10]) > 0 then redis.call('EXPIRE', ARGV[9] .. old, ARGV[10]) end
  end
  redis.call('HSET', KEYS[9], ARGV[8], cjson.encode(rec))
  redis.call('HSET', KEYS[8], 'sid', ARGV[8])
end
local event = ARGV[1]
if string.sub(event, 1, 1) == '{' and string.sub(event, -1) == '}' and event ~= '{}' then
  event = string.sub(event, 1, -2) .. ',"gen":' .. gen .. '}'
end
redis.call('RPUSH', KEYS[3], event)
redis.call('ZADD', KEYS[5], 'NX', ARGV[5], ARGV[4])
redis.call('HINCRBY', KEYS[7], 'events_queued', 1)
if redis.call('SET', KEYS[4], 'k:' .. ARGV[2], 'NX', 'PX', ARGV[3]) then
  redis.call('RPUSH', KEYS[6], ARGV[7])
  return 1
end
return 0
"""

# KEYS: lease, dirty   ARGV: kick_token, exec_id, ttl_ms, route_key, now
# A free lease or any queued kick may be taken: a job that waited in the queue longer than the kick
# lease lived still runs the route instead of going to the back. A backoff lease only by its own job.
ACQUIRE = """
local v = redis.call('GET', KEYS[1])
if (not v) or string.sub(v, 1, 2) == 'k:' or v == ('d:' .. ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  redis.call('ZADD', KEYS[2], 'NX', ARGV[5], ARGV[4])
  return 1
end
return 0
"""

# KEYS: inbox, proc, lease, running, runinfo   ARGV: exec_id, ttl_ms, route_key, deadline, info, max_batch
# A leftover proc list (from a crashed run) is retried as-is before new mail is taken.
TAKE = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
redis.call('PEXPIRE', KEYS[3], ARGV[2])
if redis.call('LLEN', KEYS[2]) == 0 then
  local n = tonumber(ARGV[6])
  local items = redis.call('LRANGE', KEYS[1], 0, n - 1)
  if #items > 0 then
    redis.call('RPUSH', KEYS[2], unpack(items))
    redis.call('LTRIM', KEYS[1], #items, -1)
  end
end
local batch = redis.call('LRANGE', KEYS[2], 0, -1)
if #batch > 0 then
  redis.call('ZADD', KEYS[4], ARGV[4], ARGV[3])
  redis.call('HSET', KEYS[5], ARGV[3], ARGV[5])
end
return batch
"""

# KEYS: proc, lease, route, fails, answer, sent, dead, dead_order, metrics, sessions
# ARGV: exec_id, ttl_ms, n, batch_id, now, gen ('' = write no session entries), log_prefix, log_cap,
#       tokens_in, tokens_out, tokens_cache_read, route_retention_s, n_entries, entries..., then (dead_id, record)
#       pairs; the last ARGV is the commit's token
# Consumes the first n events of the batch and, in the same step, records each in the session log or
# the dead letters, and drops the batch's caches: a retried batch is never recorded twice, and
# per-route state stays bounded: the route's state, its session records and its current log expire
# route_retention_s after its last commit (0 = kept), so a route nobody talks to any more leaves nothing.
# Entries go to the route's current session only while the route is still at the run's generation: a
# turn that a user reset overtook consumes its batch and writes nothing (returns 2).
# Idempotent: redis-py resends a command whose connection dropped before the answer (a failover, a restart);
# a COMMIT that ran already finds its token in the route's state and returns what it returned then, instead of
# trimming the next segment's events.
COMMIT = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local token = ARGV[#ARGV]
local done = redis.call('HGET', KEYS[3], 'commit')
if done and string.sub(done, 1, #token + 1) == token .. ':' then return tonumber(string.sub(done, #token + 2)) end
redis.call('LTRIM', KEYS[1], tonumber(ARGV[3]), -1)
local ne = tonumber(ARGV[13])
local result = 1
if ne > 0 then
  local sid = redis.call('HGET', KEYS[3], 'sid')
  if ARGV[6] ~= '' and sid and (redis.call('HGET', KEYS[3], 'gen') or '0') == ARGV[6] then
    local log = ARGV[7] .. sid
    for i = 14, 13 + ne do redis.call('RPUSH', log, ARGV[i]) end
    redis.call('LTRIM', log, -tonumber(ARGV[8]), -1)
    redis.call('HINCRBY', KEYS[10], sid .. '#in', ARGV[9])
    redis.call('HINCRBY', KEYS[10], sid .. '#out', ARGV[10])
    redis.call('HINCRBY', KEYS[10], sid .. '#cache_read', ARGV[11])
    redis.call('HINCRBY', KEYS[10], sid .. '#turns', 1)
  else
    result = 2
  end
end
for i = 14 + ne, #ARGV - 1, 2 do
  redis.call('HSET', KEYS[7], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[8], ARGV[5], ARGV[i])
  redis.call('HINCRBY', KEYS[9], 'dead_lettered', 1)
end
redis.call('HDEL', KEYS[4], 'f:' .. ARGV[4], 's:' .. ARGV[4])
if redis.call('HGET', KEYS[4], 'cur') == ARGV[4] then redis.call('HDEL', KEYS[4], 'cur') end
if redis.call('LLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[4]) end
redis.call('DEL', KEYS[5], KEYS[6])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[3], 'commit', token .. ':' .. result)
local keep = tonumber(ARGV[12])
if keep > 0 then
  local sid = redis.call('HGET', KEYS[3], 'sid')
  redis.call('EXPIRE', KEYS[3], keep)
  redis.call('EXPIRE', KEYS[10], keep)
  if sid then redis.call('EXPIRE', ARGV[7] .. sid, keep) end
end
return result
"""

# KEYS: inbox, proc, lease, dirty, running, runinfo   ARGV: exec_id, route_key
# "Empty? then release" in one step: a push that lands after this sees no lease and kicks a run.
FINISH = """
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
redis.call('ZREM', KEYS[5], ARGV[2])
redis.call('HDEL', KEYS[6], ARGV[2])
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

# KEYS: lease, running, runinfo, kicks, delayed
# ARGV: exec_id, lease_value, ttl_ms, route_key, kick_record, due (0 = at once)
# Hand the route to a successor run (at once, or after a backoff) without letting anyone else in.
HANDOVER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('ZREM', KEYS[2], ARGV[4])
redis.call('HDEL', KEYS[3], ARGV[4])
if tonumber(ARGV[6]) > 0 then
  redis.call('ZADD', KEYS[5], ARGV[6], ARGV[5])
else
  redis.call('RPUSH', KEYS[4], ARGV[5])
end
return 1
"""

# KEYS: lease, running, runinfo   ARGV: exec_id, route_key
# Give the route up and leave it dirty (work paused for an operator): the sweep kicks it later.
RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
return 1
"""

# KEYS: inbox, proc, lease, dirty, kicks
# ARGV: kick_token, ttl_ms, route_key, kick_record, now, listed_tokens (",t1,t2,"), job_key_prefix,
#       RQ's job key namespace, RQ's queue key namespace, front ("1": the record goes to the head of the list),
#       started_before (RQ's UTC timestamp format: a job started before it that still left the kick lease died)
# The sweep's repair. A route without work leaves `dirty`. A route with work gets a kick when nothing
# will run it: no lease, or a kick or backoff lease whose record is neither waiting (in our kick list or
# among the delayed retries) nor an RQ job still waiting or starting — lost in a crash, or with Redis'
# last second of writes. A job whose hash says 'queued' but which is not in its queue list was moved to
# RQ's intermediate queue by a worker that died before starting it (RQ cleans those up only after
# minutes): it counts as lost. So does a job that started a while ago (RQ's started_at) and never took the
# lease: taking it is the job's first step, so its worker or work-horse was killed in between (a slow job that
# is still alive finds a kick lease again and takes it, or finds the new run holding the route and leaves).
# A lease whose record or job waits is renewed, so waiting under load never looks like a loss.
KICK = """
local work = redis.call('LLEN', KEYS[1]) > 0 or redis.call('LLEN', KEYS[2]) > 0
local v = redis.call('GET', KEYS[3])
if v then
  local kind = string.sub(v, 1, 2)
  if kind ~= 'k:' and kind ~= 'd:' then return 0 end  -- a run holds the route
  local tok = string.sub(v, 3)
  local job = ARGV[7] .. string.sub(tok, 1, 12)
  local status, origin, started = unpack(redis.call('HMGET', job, 'status', 'origin', 'started_at'))
  if status == 'queued' and origin then  -- 'queued' but not in its queue: stranded by a dead worker
    local id = string.sub(job, #ARGV[8] + 1)
    if not redis.call('LPOS', ARGV[9] .. origin, id) then status = 'stranded' end
  end
  if string.find(ARGV[6], ',' .. tok .. ',', 1, true) or status == 'queued' or status == 'scheduled'
      or status == 'deferred' then
    if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
    return 0
  end
  if status == 'started' and not (started and started ~= '' and started < ARGV[11]) then
    return 0  -- its job is taking the lease now
  end
  if not work then  -- a lost kick for a route with nothing to do: nothing to run
    redis.call('DEL', KEYS[3])
    redis.call('ZREM', KEYS[4], ARGV[3])
    return -1
  end
elseif not work then
  redis.call('ZREM', KEYS[4], ARGV[3])
  return -1
end
redis.call('SET', KEYS[3], 'k:' .. ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[4], 'NX', ARGV[5], ARGV[3])
if ARGV[10] == '1' then redis.call('LPUSH', KEYS[5], ARGV[4]) else redis.call('RPUSH', KEYS[5], ARGV[4]) end
return 1
"""

# KEYS: lease, running, runinfo, fails, kicks, delayed, metrics
# ARGV: exec_id, lease_value, ttl_ms, route_key, batch_id, kick_record, due
# The watchdog breaks a run stuck past its budget: the lease moves on (the stuck run is fenced out),
# the batch is charged one failure, and a successor is kicked (after a backoff when due > 0).
BREAK = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local fails = redis.call('HINCRBY', KEYS[4], 'f:' .. ARGV[5], 1)
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('ZREM', KEYS[2], ARGV[4])
redis.call('HDEL', KEYS[3], ARGV[4])
redis.call('HINCRBY', KEYS[7], 'stuck_runs', 1)
if tonumber(ARGV[7]) > 0 then
  redis.call('ZADD', KEYS[6], ARGV[7], ARGV[6])
else
  redis.call('RPUSH', KEYS[5], ARGV[6])
end
return fails
"""

# KEYS: delayed, kicks   ARGV: now, limit
# Due retries move to the kick list in one step, so a sweeper crash cannot lose them.
POP_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, record in ipairs(due) do
  redis.call('ZREM', KEYS[1], record)
  redis.call('RPUSH', KEYS[2], record)
end
return #due
"""

# KEYS: dead, dead_order, inbox, lease, dirty, kicks, replayed
# ARGV: dead_id, kick_token, ttl_ms, route_key, now, kick_record, replayed_ttl_s, events...
# Exactly one replay of a dead letter wins; its events go back in front of the route's newer mail.
REPLAY = """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
for i = #ARGV, 8, -1 do redis.call('LPUSH', KEYS[3], ARGV[i]) end
redis.call('ZADD', KEYS[5], 'NX', ARGV[5], ARGV[4])
if redis.call('SET', KEYS[4], 'k:' .. ARGV[2], 'NX', 'PX', ARGV[3]) then
  redis.call('RPUSH', KEYS[6], ARGV[6])
end
redis.call('SET', KEYS[7], ARGV[5], 'EX', ARGV[7])
return 1
"""

# KEYS: dead, dead_order, replayed marker, discarded record   ARGV: dead_id, now, keep_s
# An operator's discard: the dead letter leaves the list once (a replay or discard racing it finds it gone), its
# record is kept `keep_s` for a look, and the marker makes a later replay answer "already handled".
DISCARD = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SET', KEYS[4], raw, 'EX', ARGV[3])
redis.call('SET', KEYS[3], 'discarded:' .. ARGV[2], 'EX', ARGV[3])
return 1
"""

# KEYS: running, runinfo   ARGV: route_key, info
# The watchdog drops a registration whose run is gone, unless the route has been re-registered since.
FORGET_RUN = """
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""
