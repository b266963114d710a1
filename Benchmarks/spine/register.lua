-- wrk script for the spine benchmark (Benchmarks/spine/run.sh): POST /v1/devices
-- for device number i drawn uniformly from SPINE_TOKENS (default 1,000,000),
-- bound to person user_(i % SPINE_PEOPLE) (default 200,000). The same i always
-- gives the same token, so re-registrations happen once the space fills.
-- Bodies are byte-identical to `roost-bench load --mix register=1 --android 0 --tags 0` (MixedWorkload.swift):
-- the token is eight 32-bit words, each the next xorshift32 (13, 17, 5) step
-- from i + 1, in lowercase hex.
--
-- Environment: ROOST_KEY (bearer key), SPINE_TOKENS, SPINE_PEOPLE, SPINE_SEED
-- (each wrk thread draws from its own seeded sequence, so runs repeat), and
-- SPINE_COUNT_STATUS=1 to count answers by status in Lua (slower: wrk then
-- hands every answer to Lua) and print them at the end.
local bit = require("bit")
local bxor, lshift, rshift, tohex = bit.bxor, bit.lshift, bit.rshift, bit.tohex
local key = os.getenv("ROOST_KEY") or "none"
local tokens = tonumber(os.getenv("SPINE_TOKENS") or "1000000")
local people = tonumber(os.getenv("SPINE_PEOPLE") or "200000")
local seed = tonumber(os.getenv("SPINE_SEED") or "1")
local headers = { ["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json" }
local parts = {}

local threads = {}
local next_id = 0
function setup(thread)
  next_id = next_id + 1
  thread:set("thread_id", next_id)
  table.insert(threads, thread)
end

function init(args)
  math.randomseed(seed * 7919 + (thread_id or 0))
end

function request()
  local i = math.random(0, tokens - 1)
  local s = i + 1
  for w = 1, 8 do
    s = bxor(s, lshift(s, 13))
    s = bxor(s, rshift(s, 17))
    s = bxor(s, lshift(s, 5))
    parts[w] = tohex(s, 8)
  end
  local body = '{"platform":"ios","environment":"production","token":"' .. table.concat(parts) ..
    '","external_id":"user_' .. (i % people) ..
    '","app_version":"2.4.0","locale":"en-US","timezone":"Europe/Berlin"}'
  return wrk.format("POST", "/v1/devices", headers, body)
end

if os.getenv("SPINE_COUNT_STATUS") == "1" then
  statuses = {}
  function response(status, headers, body)
    statuses[status] = (statuses[status] or 0) + 1
  end
end

function done(summary, latency, requests)
  if os.getenv("SPINE_COUNT_STATUS") ~= "1" then return end
  local total = {}
  for _, thread in ipairs(threads) do
    local counts = thread:get("statuses")
    if counts then
      for status, count in pairs(counts) do total[status] = (total[status] or 0) + count end
    end
  end
  local unexpected = 0
  for status, count in pairs(total) do
    io.write(string.format("status %d: %d\n", status, count))
    if status ~= 200 and status ~= 201 then unexpected = unexpected + count end
  end
  io.write(string.format("unexpected statuses: %d\n", unexpected))
end
