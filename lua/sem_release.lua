-- sem_release: give back the permits of one acquisition.
--
-- KEYS[1]  the semaphore hash (see sem_acquire.lua)
-- KEYS[2]  the semaphore's channel
-- ARGV[1]  the permit id
-- ARGV[2]  "SPUBLISH" on a cluster, anything else for PUBLISH
-- ARGV[3]  the message to publish
--
-- Returns 0 released, -1 not held (its lease ended, or released already: a
-- re-send finds nothing, and changes nothing); error "WRONGTYPE <type> 1",
-- or the server's own refusal.
--
-- Side effects: HDEL of the id, its deadline and its request; the hash goes with its
-- last holder. The channel is told when ':wait' says a waiter listens.

local now = now_ms()
local s, refusal, other = snapshot(now, 'semaphore')
if not s then
  if other then return -1 end
  return refusal
end
if not s.f[ARGV[1]] then return -1 end
redis.call('HDEL', KEYS[1], ARGV[1], ':' .. ARGV[1], ':q:' .. ARGV[1])
if s.readers <= 1 then
  redis.call('DEL', KEYS[1])
end
wake_waiters(s, ARGV[2], ARGV[3])
return 0
