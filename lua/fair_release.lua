-- fair_release: leave one level of a fair lock's hold; the last level wakes
-- the head of the queue, and only it.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiter queue
-- KEYS[3]  the waiter deadlines
-- KEYS[4]  the lock's fencing-token counter
-- KEYS[5]  this request's replay record (lives ARGV[3] ms)
-- ARGV[1]  owner field
-- ARGV[2]  lease in ms to re-apply while still held, 0 to leave the TTL alone
-- ARGV[3]  replay-record lifetime in ms (> 0)
-- ARGV[4]  the fencing token of the hold being released, or "" when unknown
-- ARGV[5]  prefix of the waiters' wake channels
-- ARGV[6]  "SPUBLISH" on a cluster (sharded pub/sub: the channels share the
--          lock's slot), anything else for PUBLISH
--
-- Returns 0 released (and the live head, if any, woken), n > 0 levels left,
-- -1 not held by this hold (nothing changed); error "WRONGTYPE <type>".
--
-- Side effects: as release.lua; on the last level, waiters whose deadline
-- passed (server TIME) are evicted before the head is chosen, so a dead
-- waiter is never the only one told. Replays: as release.lua.

local publish = ARGV[6] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

local rec = redis.call('GET', KEYS[5])
if rec then
  return tonumber(rec)
end

local count = redis.pcall('HGET', KEYS[1], ARGV[1])
if type(count) == 'table' then
  return redis.error_reply('WRONGTYPE ' .. redis.call('TYPE', KEYS[1])['ok'])
end
if not count then
  return -1
end
if ARGV[4] ~= '' then
  local token = redis.pcall('GET', KEYS[4])
  if type(token) == 'table' or tonumber(token or '0') ~= tonumber(ARGV[4]) then
    return -1
  end
end

count = tonumber(count) - 1
if count > 0 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  if tonumber(ARGV[2]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
  end
  redis.call('SET', KEYS[5], count, 'PX', ARGV[3])
  return count
end

redis.call('DEL', KEYS[1])
if ARGV[4] == '' then
  redis.call('SET', KEYS[5], 0, 'PX', ARGV[3])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stale = redis.pcall('ZRANGEBYSCORE', KEYS[3], '-inf', now)
if not stale.err then
  for _, id in ipairs(stale) do
    redis.call('LREM', KEYS[2], 0, id)
    redis.call('ZREM', KEYS[3], id)
  end
end
local head = redis.pcall('LINDEX', KEYS[2], 0)
if type(head) == 'string' then
  redis.call(publish, ARGV[5] .. head, '0')
end
return 0
