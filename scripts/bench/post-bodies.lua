-- wrk script for scripts/bench-e2e: POSTs request bodies read from a file, one per
-- line, each thread taking its own share (thread t of T sends lines t, t+T, ...).
--
--   wrk -t T -c C -d SECONDS -s post-bodies.lua URL -- BODIES_FILE T PATH [DONE_DIR [EXPECTED [close]]]
--
-- With "close", every request says "Connection: close": nginx closes the connection
-- after its answer and wrk opens a new one (a new TCP connection and TLS handshake)
-- for the next request. DONE_DIR and EXPECTED may be empty strings.
--
-- With DONE_DIR, each thread stops once every line of its share is answered and
-- writes DONE_DIR/done.<t>; wrk itself only returns after --duration or SIGINT, so
-- the caller sends SIGINT when all T files exist, and the rate is computed from
-- the first request to the last answer (a monotonic clock), not wrk's own duration.
-- Without DONE_DIR (or with an empty one) it cycles through its share until --duration
-- or SIGINT. With EXPECTED (a status such as 401), every answer with another status is
-- counted as unexpected, and the first few such statuses are named.
-- Prints one line for the benchmark script to read:
--   requests=N seconds=S rps=R p50_ms=X p99_ms=Y non_2xx=Z errors=E unexpected=U statuses=S:N,...

local ffi = require("ffi")
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
  int clock_gettime(int clock, bench_timespec *now);
]]
local function now_seconds()
  local now = ffi.new("bench_timespec")
  ffi.C.clock_gettime(1, now) -- CLOCK_MONOTONIC
  return tonumber(now.tv_sec) + tonumber(now.tv_nsec) / 1e9
end

local threads = {}
local next_id = 0

function setup(thread)
  next_id = next_id + 1
  thread:set("id", next_id)
  table.insert(threads, thread)
end

function init(args)
  local file, thread_count, path = args[1], tonumber(args[2]), args[3]
  done_dir = args[4]
  if done_dir == "" then done_dir = nil end
  expected = tonumber(args[5] or "")
  unexpected = 0
  -- Counts of the unexpected statuses, as "status:count" pairs in a string (wrk copies
  -- only plain values between a thread and done()).
  unexpected_counts = {}
  unexpected_statuses = ""
  local headers = { ["Content-Type"] = "application/json" }
  if args[6] == "close" then headers["Connection"] = "close" end
  requests_ = {}
  local line_number = 0
  for line in io.lines(file) do
    if line_number % thread_count == id - 1 then
      requests_[#requests_ + 1] = wrk.format("POST", path, headers, line)
    end
    line_number = line_number + 1
  end
  cursor = 0
  answered = 0
  non_2xx = 0
  started_at = 0
  finished_at = 0
end

function request()
  if started_at == 0 then started_at = now_seconds() end
  cursor = cursor % #requests_ + 1
  return requests_[cursor]
end

function response(status, headers, body)
  answered = answered + 1
  finished_at = now_seconds()
  if status < 200 or status > 299 then non_2xx = non_2xx + 1 end
  if expected and status ~= expected then
    unexpected = unexpected + 1
    unexpected_counts[status] = (unexpected_counts[status] or 0) + 1
    local parts = {}
    for code, count in pairs(unexpected_counts) do parts[#parts + 1] = code .. ":" .. count end
    table.sort(parts)
    unexpected_statuses = table.concat(parts, ",")
  end
  if done_dir and answered == #requests_ then
    local marker = io.open(done_dir .. "/done." .. id, "w")
    marker:close()
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local non, first, last, answers, odd, named = 0, math.huge, 0, 0, 0, {}
  for _, thread in ipairs(threads) do
    non = non + thread:get("non_2xx")
    odd = odd + (thread:get("unexpected") or 0)
    local statuses = thread:get("unexpected_statuses")
    if statuses and statuses ~= "" then named[#named + 1] = statuses end
    answers = answers + thread:get("answered")
    local started, finished = thread:get("started_at"), thread:get("finished_at")
    if started > 0 and started < first then first = started end
    if finished > last then last = finished end
  end
  local seconds = last > first and last - first or summary.duration / 1e6
  local errors = summary.errors
  io.write(string.format(
    "requests=%d seconds=%.3f rps=%.1f p50_ms=%.2f p99_ms=%.2f non_2xx=%d errors=%d unexpected=%d statuses=%s\n",
    answers, seconds, answers / seconds, latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, non, errors.connect + errors.read + errors.write + errors.timeout, odd,
    #named > 0 and table.concat(named, ",") or "-"))
end
