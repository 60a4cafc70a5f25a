-- force_unlock: delete a lock whoever holds it, and wake its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's unlock channel (non-fair waiters)
-- KEYS[3]  the waiter queue (fair waiters; absent for a non-fair lock)
-- KEYS[4]  the fair waiters' grant asks (absent for a non-fair lock): a
--          head with an ask listens on ARGV[2] .. the wake id at its end
-- KEYS[5]  the reentrant lock's waiters list (clients whose waits sleep,
--          see shared_wake.lua; absent for other kinds)
-- KEYS[6]  a read-write lock's writers' channel (its waiting writers
--          listen there; told only when the hash is a read-write lock's)
-- ARGV[1]  message to publish
-- ARGV[2]  prefix of the waiters' wake channels (fair waiters, and the
--          clients of the reentrant lock's waiters list)
-- ARGV[3]  "SPUBLISH" on a cluster (sharded pub/sub: the channels share the
--          lock's slot), anything else for PUBLISH
-- ARGV[4]  for one side of a read-write lock, "read" or "write": the lock
--          is deleted only while that side holds it (a writer holds it, or
--          readers without a writer); "" for any other lock
-- KEYS[7]  this call's replay record (lives ARGV[5] ms): a force-unlock
--          sent again after its connection broke before the reply gets
--          the first sending's reply and deletes nothing (a lock taken
--          since the first sending is not freed by it)
-- ARGV[5]  the replay record's lifetime in ms
-- ARGV[6]  "1" when this call was never sent before, anything else on a
--          re-send
--
-- Returns 1 when a lock was deleted, 0 when there was none.
--   error "WRONGTYPE <type> 1" when KEYS[1] is not a hash, "WRONGTYPE
--   <foreign(1)> 1" when it is a hash lockwarden did not write (no ':kind':
--   a Redisson lock's, or another program's; see foreign in shared.lua),
--   "WRONGKIND <kind>" when a read-write side's handle (ARGV[4]) finds
--   another kind's lock, or any handle a count-down latch (no lock);
--   nothing is deleted
--
-- A read-write lock's 'mode' field is not an owner (see rw_acquire.lua).
--
-- Side effects: DEL of KEYS[1], a PUBLISH on KEYS[2] (and on KEYS[6] for
-- a read-write lock, whichever handle asks: its writers' marks went with
-- the hash), one on the wake channel of the queue's head when there is
-- one, and one to the first client of KEYS[5] that still listens
-- (wake_next); for a semaphore, whose every permit is free now, to every
-- client of KEYS[5] that still listens. The fencing-token counter
-- and the queue are kept, so tokens keep increasing and fair order stays.
-- A refused PUBLISH (an ACL without channel rights) does not undo the
-- delete: waiters then wake at their lease bound.

if KEYS[7] then
  local again = replayed(7, ARGV[6])
  if again then return again[1] end
end
local function done(n)
  if KEYS[7] then answer(7, ARGV[5], {n}) end
  return n
end

local publish = ARGV[3] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return done(0)
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. kind .. ' 1')
end
local own = redis.call('HGET', KEYS[1], ':kind')
if not own then
  -- A hash some other program wrote (a Redisson lock's too): not a
  -- lockwarden lock, never deleted here.
  return redis.error_reply('WRONGTYPE ' .. foreign(1) .. ' 1')
end
if own == 'latch' then
  -- A count-down latch is no lock: it has its own delete.
  return redis.error_reply('WRONGKIND latch')
end
if ARGV[4] == 'read' or ARGV[4] == 'write' then
  -- A side's handle frees only a read-write lock (a semaphore's permits
  -- and a reentrant lock's holder are no side's).
  local other = wrong_kind(own, 'rw')
  if other then return other end
  local writer, readers = false, false
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(f, 1, 1) ~= ':' and f ~= 'mode' then
      if string.sub(f, -2) == ':r' then readers = true else writer = true end
    end
  end
  local held = writer
  if ARGV[4] == 'read' then held = readers and not writer end
  if not held then
    return done(0)
  end
end
redis.call('DEL', KEYS[1])
redis.pcall(publish, KEYS[2], ARGV[1])
if own == 'rw' and KEYS[6] then
  redis.pcall(publish, KEYS[6], ARGV[1])
end
local head = redis.pcall('LINDEX', KEYS[3], 0)
if type(head) == 'string' then
  local ask = KEYS[4] and redis.pcall('HGET', KEYS[4], head)
  local wake = type(ask) == 'string' and string.match(ask, ' (%S+)$') or head
  redis.pcall(publish, ARGV[2] .. wake, ARGV[1])
end
if own == 'semaphore' then
  -- A call that tells a client has popped it: the loop ends with the
  -- list (or at a refused PUBLISH).
  while wake_next(5, ARGV[2], publish, ARGV[1]) do end
else
  wake_next(5, ARGV[2], publish, ARGV[1])
end
return done(1)
