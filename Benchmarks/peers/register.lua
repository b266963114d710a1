-- One registration in Redis, the peer of `POST /v1/devices` in `make bench`
-- (Benchmarks/peers/peers.sh): what Roost does for a re-registration or a new
-- device of the benchmark's shape, as one atomic script.
--
--   EVALSHA sha 1 dev:NNNNNNNNNNNN PEOPLE CAP
--
-- KEYS[1] is the device (redis-benchmark's `dev:__rand_int__`, a 12-digit
-- device number below --tokens); the person is user_(number mod PEOPLE), as
-- in `roost-bench load`. The device is a hash (token, person, platform,
-- environment, app_version, locale, timezone, created_at, last_seen_at), the
-- person a set of device keys. A device that changes person leaves the old
-- person's set. A person keeps at most CAP devices (spec §5.2): binding one
-- more evicts the one whose latest registration is oldest (hash and
-- membership deleted). Answers 1 for a new device (Roost's 201), 0 for a known
-- one (200).
local device = KEYS[1]
local number = tonumber(string.sub(device, 5))
local person = "person:user_" .. (number % tonumber(ARGV[1]))
local cap = tonumber(ARGV[2])
local now = redis.call("TIME")
local stamp = now[1] .. "." .. string.format("%06d", tonumber(now[2]))
local old = redis.call("HGET", device, "person")
if old and old ~= person then redis.call("SREM", old, device) end
redis.call(
  "HSET", device, "token", string.format("%064d", number), "person", person, "platform", "ios",
  "environment", "production", "app_version", "2.4.0", "locale", "en-US", "timezone", "Europe/Berlin",
  "last_seen_at", stamp)
if not old then redis.call("HSET", device, "created_at", stamp) end
if redis.call("SADD", person, device) == 1 and redis.call("SCARD", person) > cap then
  local oldest, oldest_seen = nil, nil
  for _, member in ipairs(redis.call("SMEMBERS", person)) do
    if member ~= device then
      local seen = redis.call("HGET", member, "last_seen_at")
      if oldest_seen == nil or (seen or "") < oldest_seen then oldest, oldest_seen = member, seen or "" end
    end
  end
  redis.call("SREM", person, oldest)
  redis.call("DEL", oldest)
end
if old then return 0 end
return 1
