-- wake_next: pass a reentrant lock's wake-up on, for a client that cannot
-- use it.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's waiters list (clients whose waits sleep, see
--          shared_wake.lua)
-- KEYS[3]  the waiters' grant asks (see acquire.lua)
-- KEYS[4]  the lock's fencing-token counter
-- ARGV[1]  message to publish on the wake channel of the client woken
-- ARGV[2]  prefix of the clients' wake channels (prefix .. client id)
-- ARGV[3]  "SPUBLISH" on a cluster (sharded pub/sub: the channels share the
--          lock's slot), anything else for PUBLISH
-- ARGV[4]  with ARGV[5]: the record key of a wait that asked for direct
--          grants and stops without the lock
-- ARGV[5]  that wait's owner field
-- ARGV[6]  that wait's client id (its ask's field in KEYS[3])
--
-- Called by a client whose last wait on the lock was dropped, or failed,
-- after listening; by a client that got a wake-up with no wait left to
-- take it; and by a client that closes. Each may have taken the only
-- wake-up of an unlock, so the lock would stay free while other clients
-- sleep.
--
-- A wait that asked for direct grants (ARGV[4] to ARGV[6]) takes its ask
-- back (when it is still its own: the client's newest) and gives back a
-- grant made to it that it never learned of: a hold whose ':take' is its
-- record key, at one level (a level above it is another wait's of the
-- same owner, which re-entered the grant: only the grant's level goes).
--
-- Returns 1 when a client was woken, 0 otherwise.
--
-- Side effects: when the lock is free, wake_next pops and tells the first
-- client of KEYS[2] that still listens. When it is held and clients sleep,
-- the hold's ':wait' is set (shared_acquire.lua), so its unlock wakes one.
-- A key of another type at KEYS[1], another kind's hash and a hash
-- lockwarden did not write are left alone.

local publish = ARGV[3] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

local grant = reentrant_grant(1, 3, 4, 2)
if ARGV[6] then
  local ask = redis.pcall('HGET', KEYS[3], ARGV[6])
  if type(ask) == 'string' and string.match(ask, '^%d+ (%S+) ') == ARGV[4] then
    redis.call('HDEL', KEYS[3], ARGV[6])
  end
  local got = redis.pcall('HMGET', KEYS[1], ':take', ':kind', ARGV[5])
  if not got.err and got[1] == ARGV[4] and got[2] == 'reentrant' and got[3] then
    if got[3] == '1' then
      redis.call('DEL', KEYS[1])
    else
      redis.call('HINCRBY', KEYS[1], ARGV[5], -1)
    end
  end
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return wake_next(2, ARGV[2], publish, ARGV[1], grant) and 1 or 0
end
-- Only a reentrant lock's hold is marked: never another kind's hash, nor
-- a hash lockwarden did not write (see wrong_kind in shared.lua).
if kind == 'hash' and redis.call('EXISTS', KEYS[2]) == 1
    and redis.call('HGET', KEYS[1], ':kind') == 'reentrant' then
  redis.pcall('HSET', KEYS[1], ':wait', '1')
end
return 0
