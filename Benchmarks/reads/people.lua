-- wrk script for Benchmarks/reads/run.py: GET /v1/people/user-<n> for n drawn
-- uniformly from READS_PEOPLE (default 20,000), each thread from its own
-- seeded sequence. Environment: ROOST_KEY (bearer key), READS_PEOPLE, READS_SEED.
local key = os.getenv("ROOST_KEY") or "none"
local people = tonumber(os.getenv("READS_PEOPLE") or "20000")
local seed = tonumber(os.getenv("READS_SEED") or "1")
local headers = { ["Authorization"] = "Bearer " .. key }
local next_id = 0
function setup(thread)
  next_id = next_id + 1
  thread:set("thread_id", next_id)
end
function init(args)
  math.randomseed(seed * 1000 + (thread_id or 0))
end
function request()
  return wrk.format("GET", "/v1/people/user-" .. math.random(0, people - 1), headers)
end
