-- raise_token: write a quorum's chosen fencing token back to one master.
--
-- KEYS[1]  the lock's fencing-token counter (a string, never given a TTL)
-- KEYS[2]  the lock hash
-- ARGV[1]  the token chosen by the quorum (> 0)
-- ARGV[2]  the owner field of the hold the token was chosen for
-- ARGV[3]  the token that hold got from this master
--
-- Returns the counter after the call: ARGV[1], or the counter's own value
-- when it was higher already.
--   error "WRONGTYPE <type> 1" when KEYS[1] is not a string, or the server's
--   own refusal (OOM, READONLY, ...); nothing is changed
--
-- Side effects: SET of KEYS[1] to ARGV[1] only when it is lower (or absent),
-- so the counter never goes down and a replay changes nothing. When that
-- hold (owner ARGV[2], token ARGV[3]) is still the lock's, its ':token'
-- becomes ARGV[1] too, so its release and re-entries go by the quorum's
-- token; any other hold keeps its own.

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
local held = redis.pcall('HMGET', KEYS[2], ARGV[2], ':token')
if not held.err and held[1] and held[2] == ARGV[3] then
  redis.call('HSET', KEYS[2], ':token', ARGV[1])
end
return wanted
