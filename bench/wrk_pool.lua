-- wrk script for bench/wrk.py: replays pre-built signed+encrypted requests, each one once.
-- Usage: wrk ... -s wrk_pool.lua URL -- POOL_FILE THREADS
-- POOL_FILE holds `<length>\n<raw HTTP request>` records. Thread k of N keeps records k, k+N, k+2N, ...
-- so no two threads send the same event (a repeated event is deduped and would look cheaper).

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
  local path, nthreads = args[1], tonumber(args[2])
  local f = assert(io.open(path, "rb"))
  local data = f:read("*a")
  f:close()
  local pos, k = 1, 0
  while pos <= #data do
    local nl = string.find(data, "\n", pos, true)
    local len = tonumber(string.sub(data, pos, nl - 1))
    if k % nthreads == tid then
      size = size + 1
      pool[size] = string.sub(data, nl + 1, nl + len)
    end
    k = k + 1
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
