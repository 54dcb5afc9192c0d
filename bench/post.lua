-- wrk script for bench/run.py: POST one cluster per request, over keep-alive.
--   wrk ... -s bench/post.lua URL -- MODE TOKEN [IDS_FILE]
-- MODE create: a new random UUID per request (the body's id and Idempotency-Key)
-- MODE replay: an id picked from IDS_FILE (one UUID per line; objects that exist)
-- MODE public: platform_svc's public body (no id: the platform invents it)
-- MODE public-replay: the same, every request with the one Idempotency-Key given as the third argument
-- MODE unknown-key: the same, each request with a well-formed API key nobody holds (TOKEN unused)
-- MODE read: GET the URL (a public read: platform_svc's list of clusters)
-- done() prints one line "BENCH {json}": requests, duration, errors, status counts
-- and, for MODE public, how many answers said "sync_state": "synced".

local TEAM = "0193a1b2-7c00-7000-8000-0000000000aa"
local FIELDS = '"name": "bench", "region": "eu-west-1", "postgres_version": 16, "plan": "standard-2", "storage_gb": 100'
local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

local mode, token, ids, replay_key
counts = {}  -- globals: done() reads them from each thread with thread:get()
synced = 0

local function seed()
   local f = io.open("/dev/urandom", "rb")
   local b = f:read(6)
   f:close()
   local n = 0
   for i = 1, #b do n = n * 256 + b:byte(i) end
   math.randomseed(n)
end

local function hex4()
   return string.format("%04x", math.random(0, 0xffff))
end

local function uuid4()
   return hex4() .. hex4() .. "-" .. hex4() .. "-" .. string.format("4%03x", math.random(0, 0xfff)) .. "-"
      .. string.format("%04x", 0x8000 + math.random(0, 0x3fff)) .. "-" .. hex4() .. hex4() .. hex4()
end

function init(args)
   mode, token = args[1], args[2]
   seed()
   if mode == "replay" then
      ids = {}
      for line in io.lines(args[3]) do ids[#ids + 1] = line end
   end
   replay_key = args[3]
   counts = {}
end

function request()
   local headers = {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token}
   if mode == "read" then
      return wrk.format("GET", nil, headers)
   end
   if mode == "unknown-key" then
      headers["Authorization"] = "Bearer " .. hex4() .. hex4() .. hex4() .. hex4() .. "." .. uuid4() .. uuid4()
   elseif mode == "public-replay" then
      headers["Idempotency-Key"] = replay_key
   end
   if mode == "public" or mode == "public-replay" or mode == "unknown-key" then
      return wrk.format("POST", nil, headers, "{" .. FIELDS .. "}")
   end
   local id
   if mode == "replay" then id = ids[math.random(#ids)] else id = uuid4() end
   headers["Idempotency-Key"] = id
   return wrk.format("POST", nil, headers, '{"id": "' .. id .. '", "team_id": "' .. TEAM .. '", ' .. FIELDS .. '}')
end

function response(status, headers, body)
   counts[status] = (counts[status] or 0) + 1
   if mode == "public" and body and string.find(body, '"sync_state":%s*"synced"') then
      synced = synced + 1
   end
end

function done(summary, latency, requests)
   local total, parts = {}, {}
   local nsynced = 0
   for _, thread in ipairs(threads) do
      local c = thread:get("counts")
      for status, n in pairs(c) do total[status] = (total[status] or 0) + n end
      nsynced = nsynced + (thread:get("synced") or 0)
   end
   for status, n in pairs(total) do parts[#parts + 1] = string.format('"%d": %d', status, n) end
   local e = summary.errors
   io.write(string.format(
      'BENCH {"requests": %d, "duration_us": %d, "errors": {"connect": %d, "read": %d, "write": %d, "timeout": %d},'
         .. ' "status": {%s}, "synced": %d, "p50_us": %d, "p99_us": %d}\n',
      summary.requests, summary.duration, e.connect, e.read, e.write, e.timeout,
      table.concat(parts, ", "), nsynced, latency:percentile(50), latency:percentile(99)))
end
