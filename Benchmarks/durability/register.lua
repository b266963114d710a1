-- wrk script: POST /v1/devices with a fresh random APNs token per request,
-- bound to one of 100,000 people. ROOST_KEY comes from the environment.
local key = os.getenv("ROOST_KEY")
local counter = 0

function init(args)
  -- Each wrk thread has its own Lua state: seed it apart from the others.
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16) % 100000)
end

function request()
  counter = counter + 1
  local parts = {}
  for i = 1, 8 do parts[i] = string.format("%08x", math.random(0, 2147483647)) end
  local body = '{"platform":"ios","token":"' .. table.concat(parts) ..
    '","external_id":"user_' .. math.random(1, 100000) .. '"}'
  return wrk.format("POST", "/v1/devices", {
    ["Authorization"] = "Bearer " .. key,
    ["Content-Type"] = "application/json",
  }, body)
end
