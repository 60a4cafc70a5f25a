-- rrw_force_unlock: free one side of a read-write lock in Redisson's layout
-- whoever holds it (Redisson's client or lockwarden's), as Redisson's
-- forceUnlock does, and wake its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  Redisson's channel `redisson_rwlock:{name}`
-- ARGV[1]  "SPUBLISH" on a cluster, anything else for PUBLISH
-- ARGV[2]  "read" or "write": the side to free (only while the mode is it)
-- KEYS[3]  this call's replay record (lives ARGV[3] ms): a force-unlock
--          sent again after its connection broke before the reply gets
--          the first sending's reply and deletes nothing (a lock taken
--          since the first sending is not freed by it)
-- ARGV[3]  the replay record's lifetime in ms
-- ARGV[4]  "1" when this call was never sent before, anything else on a
--          re-send
--
-- Returns 1 when the hash was deleted (and "0" or "1" published), 0 when
-- that side did not hold it. Errors as rrw_acquire.lua's; nothing deleted.
-- The holds' timeout keys are left to their TTL (Redisson's forceUnlock
-- leaves them too).

if KEYS[3] then
  local again = replayed(3, ARGV[4])
  if again then return again[1] end
end
local function done(n)
  if KEYS[3] then answer(3, ARGV[3], {n}) end
  return n
end

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return done(0) end
if kind ~= 'hash' then return redis.error_reply('WRONGTYPE ' .. kind .. ' 1') end
local got = redis.call('HMGET', KEYS[1], 'mode', ':kind')
if got[2] then return redis.error_reply('WRONGKIND ' .. got[2]) end
if got[1] ~= 'read' and got[1] ~= 'write' then
  return redis.error_reply('WRONGTYPE ' .. foreign(1) .. ' 1')
end
if got[1] ~= ARGV[2] then return done(0) end
redis.call('DEL', KEYS[1])
wake(ARGV[1], ARGV[2] == 'read' and '0' or '1')
return done(1)
