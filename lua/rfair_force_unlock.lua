-- rfair_force_unlock: free a fair lock in Redisson's layout whoever holds
-- it, and wake the head of its queue, as RFairLock's forceUnlock does.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiters' list
-- KEYS[3]  the waiters' times
-- ARGV[1]  "SPUBLISH" on a cluster, anything else for PUBLISH
-- ARGV[2]  the waiters' channel prefix
--
-- Returns 1 when a lock was deleted, 0 when there was none. Errors as
-- redisson_force_unlock.lua's; nothing deleted.

local kind = redis.call('TYPE', KEYS[1])['ok']
drop_stale(2, 3, now_ms())
if kind == 'none' then return 0 end
if kind ~= 'hash' then return redis.error_reply('WRONGTYPE ' .. kind .. ' 1') end
local own = redis.call('HGET', KEYS[1], ':kind')
if own then return redis.error_reply('WRONGKIND ' .. own) end
if foreign(1) ~= 'redisson-lock' then
  return redis.error_reply('WRONGTYPE foreign-hash 1')
end
redis.call('DEL', KEYS[1])
wake_head(2, ARGV[2], ARGV[1])
return 1
