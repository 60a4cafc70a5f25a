-- raise_token: write a quorum's chosen fencing token back to one master.
--
-- KEYS[1]  the lock's fencing-token counter (a string, never given a TTL)
-- ARGV[1]  the token chosen by the quorum (> 0)
--
-- Returns the counter after the call: ARGV[1], or the counter's own value
-- when it was higher already.
--   error "WRONGTYPE <type> 1" when KEYS[1] is not a string, or the server's
--   own refusal (OOM, READONLY, ...); nothing is changed
--
-- Side effects: SET of KEYS[1] to ARGV[1] only when it is lower (or absent),
-- so the counter never goes down and a replay changes nothing.

local current = redis.pcall('GET', KEYS[1])
if type(current) == 'table' then
  return refused(current, 1)
end
current = tonumber(current or '0')
local wanted = tonumber(ARGV[1])
if current >= wanted then
  return current
end
redis.call('SET', KEYS[1], ARGV[1])
return wanted
