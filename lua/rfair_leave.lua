-- rfair_leave: a waiter of a fair lock in Redisson's layout gives up (see
-- rfair_shared.lua), as RFairLock's does: it leaves the list and the times,
-- and every waiter behind it has its time moved back by the thread wait
-- time. Idempotent.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiters' list
-- KEYS[3]  the waiters' times
-- ARGV[1]  the waiter's owner field
-- ARGV[2]  the thread wait time in ms
-- ARGV[3]  the waiters' channel prefix
-- ARGV[4]  "SPUBLISH" on a cluster, anything else for PUBLISH
--
-- Returns 1 when the waiter was queued, 0 when not. A waiter that was the
-- head of the queue of a free lock wakes the new head.

local queue = redis.pcall('LRANGE', KEYS[2], 0, -1)
if queue.err then return refused(queue, 2) end
local at = 0
for i = 1, #queue do
  if queue[i] == ARGV[1] then at = i break end
end
if at == 0 then
  redis.pcall('ZREM', KEYS[3], ARGV[1])
  return 0
end
for i = at + 1, #queue do
  redis.call('ZINCRBY', KEYS[3], -tonumber(ARGV[2]), queue[i])
end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('LREM', KEYS[2], 0, ARGV[1])
if at == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  wake_head(2, ARGV[3], ARGV[4])
end
return 1
