-- wake_next: pass a reentrant lock's wake-up on, for a client that cannot
-- use it.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's waiters list (clients whose waits sleep, see
--          shared_wake.lua)
-- ARGV[1]  message to publish on the wake channel of the client woken
-- ARGV[2]  prefix of the clients' wake channels (prefix .. client id)
-- ARGV[3]  "SPUBLISH" on a cluster (sharded pub/sub: the channels share the
--          lock's slot), anything else for PUBLISH
--
-- Called by a client whose last wait on the lock was dropped, or failed,
-- after listening; by a client that got a wake-up with no wait left to
-- take it; and by a client that closes. Each may have taken the only
-- wake-up of an unlock, so the lock would stay free while other clients
-- sleep.
--
-- Returns 1 when a client was woken, 0 otherwise.
--
-- Side effects: when the lock is free, wake_next pops and tells the first
-- client of KEYS[2] that still listens. When it is held and clients sleep,
-- the hold's ':wait' is set (shared_acquire.lua), so its unlock wakes one.
-- A key of another type at KEYS[1], another kind's hash and a hash
-- lockwarden did not write are left alone.

local publish = ARGV[3] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return wake_next(2, ARGV[2], publish, ARGV[1]) and 1 or 0
end
-- Only a reentrant lock's hold is marked: never another kind's hash, nor
-- a hash lockwarden did not write (see wrong_kind in shared.lua).
if kind == 'hash' and redis.call('EXISTS', KEYS[2]) == 1
    and redis.call('HGET', KEYS[1], ':kind') == 'reentrant' then
  redis.pcall('HSET', KEYS[1], ':wait', '1')
end
return 0
