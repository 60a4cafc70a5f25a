-- sem_leave: a semaphore's waiting client passes a wake-up on, and a wait
-- that stops takes back what it left.
--
-- KEYS[1] to KEYS[5] and ARGV[1] to ARGV[6] as sem_release.lua's but
-- ARGV[1], which is unused
-- ARGV[7]  with ARGV[8] and ARGV[9]: the request id of a wait that asked
--          for direct grants and stops without the permits
-- ARGV[8]  that wait's permit id
-- ARGV[9]  that wait's client id (its ask's field in KEYS[4])
--
-- Called by a client whose last wait on the semaphore was dropped, or
-- failed, after listening; by a client that got a wake-up with no wait
-- left to take it; and by a client that closes. Each may have taken the
-- only wake-up for a permit, which would then stay free while other
-- clients sleep.
--
-- A wait that asked for direct grants (ARGV[7] to ARGV[9]) takes its ask
-- back (when it is still its own: it names the wait's request) and gives
-- back a grant made to it that it never learned of: its permit id, when
-- ':q:' of it names the wait's request.
--
-- Returns 0. Side effects: the permits free then go to the listed clients
-- (hand_out, shared_permits.lua). Another kind's hash, a hash lockwarden
-- did not write and a key of another type are left alone.

local now = now_ms()
local s = snapshot(now, 'semaphore')
if not s then return 0 end
if ARGV[7] then
  local ask = redis.pcall('HGET', KEYS[4], ARGV[9])
  if type(ask) == 'string' and string.match(ask, '^%d+ (%S+) ') == ARGV[7] then
    redis.call('HDEL', KEYS[4], ARGV[9])
  end
  if s.f[ARGV[8]] and s.f[':q:' .. ARGV[8]] == ARGV[7] then
    give_back(s, ARGV[8])
  end
  -- Its client's claim goes with the wait (its permits to the others).
  if claim_of(s, now) == ARGV[9] then
    redis.call('HDEL', KEYS[1], ':claim')
    s.f[':claim'] = nil
  end
end
local total = permits_in_force(ARGV[4])
if total then
  local publish = ARGV[2] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'
  hand_out(s, now, publish, ARGV[3], total, ARGV[5], ARGV[6])
end
return 0
