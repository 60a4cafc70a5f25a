-- rfair_force_unlock: free a fair lock in Redisson's layout whoever holds
-- it, and wake the head of its queue, as RFairLock's forceUnlock does.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiters' list
-- KEYS[3]  the waiters' times
-- ARGV[1]  "SPUBLISH" on a cluster, anything else for PUBLISH
-- ARGV[2]  the waiters' channel prefix
-- KEYS[4]  this call's replay record (lives ARGV[3] ms): a force-unlock
--          sent again after its connection broke before the reply gets
--          the first sending's reply and deletes nothing (a lock taken
--          since the first sending is not freed by it)
-- ARGV[3]  the replay record's lifetime in ms
-- ARGV[4]  "1" when this call was never sent before, anything else on a
--          re-send
--
-- Returns 1 when a lock was deleted, 0 when there was none. Errors as
-- redisson_force_unlock.lua's; nothing deleted.

if KEYS[4] then
  local again = replayed(4, ARGV[4])
  if again then return again[1] end
end
local function done(n)
  if KEYS[4] then answer(4, ARGV[3], {n}) end
  return n
end

local kind = redis.call('TYPE', KEYS[1])['ok']
drop_stale(2, 3, now_ms())
if kind == 'none' then return done(0) end
if kind ~= 'hash' then return redis.error_reply('WRONGTYPE ' .. kind .. ' 1') end
local own = redis.call('HGET', KEYS[1], ':kind')
if own then return redis.error_reply('WRONGKIND ' .. own) end
if foreign(1) ~= 'redisson-lock' then
  return redis.error_reply('WRONGTYPE foreign-hash 1')
end
redis.call('DEL', KEYS[1])
wake_head(2, ARGV[2], ARGV[1])
return done(1)
