-- fair_leave: a waiter gives up (timed out, cancelled) and leaves the queue.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiter queue
-- KEYS[3]  the waiter deadlines
-- ARGV[1]  owner field of the waiter
-- ARGV[2]  prefix of the waiters' wake channels
-- ARGV[3]  "SPUBLISH" on a cluster (sharded pub/sub: the channels share the
--          lock's slot), anything else for PUBLISH
--
-- Returns 1 when the waiter was queued, 0 when it was not. Idempotent.
--
-- Side effects: LREM and ZREM of the waiter. When it was the head and the
-- lock is free, the new head is woken so the lock does not sit idle.

local publish = ARGV[3] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

local head = redis.pcall('LINDEX', KEYS[2], 0)
if type(head) == 'table' then
  return redis.error_reply('WRONGTYPE ' .. redis.call('TYPE', KEYS[2])['ok'])
end
local removed = redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.pcall('ZREM', KEYS[3], ARGV[1])
if head == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  local next = redis.call('LINDEX', KEYS[2], 0)
  if next then
    redis.call(publish, ARGV[2] .. next, '0')
  end
end
if removed > 0 then
  return 1
end
return 0
