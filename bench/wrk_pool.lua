-- wrk script for bench/wrk.py: replays pre-built signed+encrypted requests, each one once.
-- Usage: wrk -t N ... -s wrk_pool.lua URL -- POOL_PREFIX
-- Thread k (0 .. N-1) reads POOL_PREFIX.k, records of `<length>\n<raw HTTP request>`: each thread has its own
-- events, so no event is sent twice (a repeated event is deduped and would look cheaper). One small file per
-- thread keeps init() short: wrk starts a thread's requests before the next thread's init() has run.

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

local pool = {}
local size, cursor = 0, 0
sent, wrapped = 0, 0  -- globals, read by done() through thread:get

function init(args)
  local f = assert(io.open(args[1] .. "." .. tid, "rb"))
  local data = f:read("*a")
  f:close()
  local pos = 1
  while pos <= #data do
    local nl = string.find(data, "\n", pos, true)
    local len = tonumber(string.sub(data, pos, nl - 1))
    size = size + 1
    pool[size] = string.sub(data, nl + 1, nl + len)
    pos = nl + 1 + len
  end
end

function request()
  cursor = cursor + 1
  if cursor > size then  -- pool ran out: events repeat from here on; reported, the run is flagged
    cursor = 1
    wrapped = wrapped + 1
  end
  sent = sent + 1
  return pool[cursor]
end

function done(summary, latency, requests)
  local issued, wraps = 0, 0
  for _, t in ipairs(threads) do
    issued = issued + t:get("sent")
    wraps = wraps + t:get("wrapped")
  end
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,' ..
    '"p50_us":%d,"p99_us":%d,"max_us":%d,"issued":%d,"wrapped":%d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max, issued, wraps))
end
