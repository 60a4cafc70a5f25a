-- rw_release: leave one level of one side of a read-write lock.
--
-- KEYS[1]  the lock hash (fields: see shared_rw.lua)
-- KEYS[2]  the lock's unlock channel (its readers listen there)
-- KEYS[3]  this request's replay record (lives ARGV[3] ms)
-- KEYS[4]  the lock's writers' channel (its waiting writers listen there)
-- KEYS[5]  the lock's fencing-token counter (a direct grant's token; left
--          out, no direct grants)
-- ARGV[1]  the caller's field (as rw_acquire.lua)
-- ARGV[2]  lease in ms to re-apply while levels remain, 0 to leave it
-- ARGV[3]  replay-record lifetime in ms (> 0)
-- ARGV[4]  message to publish when waiters may go on
-- ARGV[5]  the write hold's fencing token, or "" when unknown (ignored for
--          the read side)
-- ARGV[6]  "SPUBLISH" on a cluster, anything else for PUBLISH
-- ARGV[7]  "1" when this request was never sent before, anything else on
--          a re-send
-- ARGV[8]  the read side's hold identity: the id of the request whose
--          fresh take made the hold (its ':q:<field>'), or "" when unknown
--          (ignored for the write side, which its token tells apart)
--
-- Returns 0 released (this side's last level of this owner), n > 0 levels
-- left, -1 not held by this hold (expired, never taken, a newer hold of
-- the same owner, told apart by its token or, for a reader, by the
-- request that made it, or the name is another kind's now): nothing
-- changed; error
-- "WRONGTYPE <type> 1", or the server's own refusal.
--
-- Side effects: the last level removes the caller's field and its
-- deadline. When no live holder is left the hash is deleted, but for the
-- marks of waiting writers, kept until their deadlines. When ':wait' says
-- someone listens, the side that can get in is told (tell_sides): the
-- writers once the lock is free, the readers once it is free or a writer
-- leaves only readers behind, unless a waiting writer's mark holds new
-- readers back (they would only be refused again). A release that leaves
-- the lock free hands it to a waiting writer that left an ask instead
-- (hand_to_writer, shared_rw.lua), and tells nobody else. The write
-- side's release first turns the waiting readers' marks into passes
-- (give_passes): those readers go in before the next writer, which is
-- neither handed the lock nor told of it while a pass stands.
-- Every reply is recorded at KEYS[3] but a write release that freed the
-- lock with its token given: a later write hold has a higher token, and a
-- replay finds no hold to touch.

if ARGV[7] ~= '1' then
  local rec = redis.call('GET', KEYS[3])
  if rec then return tonumber(rec) end
end

local now = now_ms()
local me = ARGV[1]
local s, refusal, other = snapshot(now, 'rw')
if not s then
  if other then return -1 end
  return refusal
end
local f, writer, readers = s.f, s.writer, s.readers
local count = f[me]
if not count then return -1 end
local read = is_reader(me)
if not read and ARGV[5] ~= '' and tonumber(f[':token'] or '0') ~= tonumber(ARGV[5]) then
  return -1
end
-- A read hold made before holds kept their identity has none: any
-- release of its owner is its own.
if read and ARGV[8] and ARGV[8] ~= '' and f[':q:' .. me] and f[':q:' .. me] ~= ARGV[8] then
  return -1
end

count = tonumber(count) - 1
if count > 0 then
  redis.call('HINCRBY', KEYS[1], me, -1)
  local relet = tonumber(ARGV[2])
  if relet > 0 then
    if tonumber(f[':' .. me]) < now + relet then
      redis.call('HSET', KEYS[1], ':' .. me, string.format('%d', now + relet))
    end
    redis.call('PEXPIRE', KEYS[1], relet, 'GT')
  end
  redis.call('SET', KEYS[3], count, 'PX', ARGV[3])
  return count
end

local wake, free = false, false
if read then
  redis.call('HDEL', KEYS[1], me, ':' .. me, ':q:' .. me)
  readers = readers - 1
else
  redis.call('HDEL', KEYS[1], me, ':token', ':' .. me, ':take')
  writer = nil
  give_passes(s)
  wake = readers > 0 or s.passes > 0
end
if not writer and readers == 0 then
  redis.call('DEL', KEYS[1])
  keep_marks(s, now)
  wake, free = true, true
end
if free and KEYS[5] and hand_to_writer(s, now, 5, 4, ARGV[6]) then
  wake = false
end
if wake then
  tell_sides(s, now, free, 4, ARGV[6], ARGV[4])
end
if read or ARGV[5] == '' then
  redis.call('SET', KEYS[3], 0, 'PX', ARGV[3])
end
return 0
