-- fsem_leave: a waiter of a fair semaphore gives up (timed out, cancelled)
-- and leaves the queue, giving back a direct grant it never learned of.
--
-- KEYS[1]  the semaphore hash
-- KEYS[2]  the waiter queue
-- KEYS[3]  the waiter deadlines
-- KEYS[4]  the waiters' grant asks
-- KEYS[5]  optional: the request record of the wait that gives up
-- ARGV[1]  the waiter's permit id
-- ARGV[2]  prefix of the waiters' wake channels
-- ARGV[3]  PUBLISH, or SPUBLISH on a cluster
-- ARGV[4]  prefix of the request records (KEYS[5] is it and the request id)
--
-- Returns 1 when the waiter was queued or held an unclaimed grant, 0 when
-- neither. Idempotent: a grant given back leaves its record saying "left".
-- When the waiter was the head, or gave permits back, the new head is
-- woken ("0") so free permits do not sit idle.

local publish = ARGV[3] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'
local me = ARGV[1]
local head = redis.pcall('LINDEX', KEYS[2], 0)
if type(head) == 'table' then return refused(head, 2) end
local removed = redis.call('LREM', KEYS[2], 0, me)
redis.pcall('ZREM', KEYS[3], me)
redis.pcall('HDEL', KEYS[4], me)
local freed = false
if KEYS[5] and redis.call('GET', KEYS[5]) == 'g' then
  local id = string.sub(KEYS[5], #ARGV[4] + 1)
  local held = redis.pcall('HGET', KEYS[1], ':q:' .. me)
  if held == id then
    redis.call('HDEL', KEYS[1], me, ':' .. me, ':q:' .. me)
    redis.call('SET', KEYS[5], 'left', 'KEEPTTL')
    removed = removed + 1
    freed = true
    local rest = redis.call('HKEYS', KEYS[1])
    local owners = 0
    for _, f in ipairs(rest) do
      if string.sub(f, 1, 1) ~= ':' then owners = owners + 1 end
    end
    if owners == 0 then redis.call('DEL', KEYS[1]) end
  end
end
if freed or head == me then
  local next = redis.call('LINDEX', KEYS[2], 0)
  if next then
    local ask = redis.pcall('HGET', KEYS[4], next)
    local wake = type(ask) == 'string' and string.match(ask, ' (%S+)$') or next
    redis.pcall(publish, ARGV[2] .. wake, '0')
  end
end
if removed > 0 then return 1 end
return 0
