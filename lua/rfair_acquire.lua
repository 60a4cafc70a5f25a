-- rfair_acquire: take, re-enter or queue for a fair lock in Redisson's
-- layout (see rfair_shared.lua), with RFairLock's rules, so that Redisson's
-- fair lock and lockwarden's serve one queue in order.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiters' list `redisson_lock_queue:{name}`
-- KEYS[3]  the waiters' times `redisson_lock_timeout:{name}`
-- KEYS[4]  the fencing-token counter `redisson_lock_token:{name}` (as the
--          plain lock's in Redisson's layout; RFairLock itself keeps none)
-- KEYS[5]  this request's replay record (lives ARGV[3] ms)
-- ARGV[1]  the caller's owner field
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  replay-record lifetime in ms (> 0)
-- ARGV[4]  "wait": queue when refused; "try": only look
-- ARGV[5]  the thread wait time in ms (Redisson's `threadWaitTime`)
--
-- Returns
--   {1, token, count}  acquired: fresh (count 1) or re-entered (the hold's
--                      own ':token')
--   {0, pttl}          held: the lock's remaining lease, or for a queued
--                      waiter the wait its place gives it; -3 when the lock
--                      is free but another waiter is at the head
--   error "WRONGKIND <kind>" for a lockwarden lock of its own layout,
--   "WRONGTYPE <what> <i>" for another type or a hash that is no lock;
--   nothing changed
--
-- Side effects, as RFairLock's: waiters whose time passed leave the head of
-- the queue first; a fresh take leaves the queue and moves every other
-- waiter's time back by the thread wait time; a refused "wait" joins the
-- end of the queue once (its time: the previous waiter's, or now plus the
-- lock's lease, plus the thread wait time). A "try" never joins.

local replayed = recorded(5)
if replayed then return replayed end
local me, lease, wait = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[5])
local got = redis.pcall('HMGET', KEYS[1], me, ':token', ':kind')
if got.err then return refused(got, 1) end
if got[3] then return redis.error_reply('WRONGKIND ' .. got[3]) end
local probe = redis.pcall('LLEN', KEYS[2])
if type(probe) == 'table' and probe.err then return refused(probe, 2) end
probe = redis.pcall('ZCARD', KEYS[3])
if type(probe) == 'table' and probe.err then return refused(probe, 3) end
local pttl = redis.call('PTTL', KEYS[1])
if pttl ~= -2 and not got[1] and foreign(1) == 'foreign-hash' then
  return redis.error_reply('WRONGTYPE foreign-hash 1')
end
local now = now_ms()
drop_stale(2, 3, now)

if pttl == -2 then
  local head = redis.call('LINDEX', KEYS[2], 0)
  if not head or head == me then
    local token, refusal = next_token(4)
    if not token then return refusal end
    if head then redis.call('LPOP', KEYS[2]) end
    redis.call('ZREM', KEYS[3], me)
    local others = redis.call('ZRANGE', KEYS[3], 0, -1)
    for i = 1, #others do
      redis.call('ZINCRBY', KEYS[3], -wait, others[i])
    end
    local text = string.format('%d', token)
    redis.call('HSET', KEYS[1], me, '1', ':token', text)
    redis.call('PEXPIRE', KEYS[1], lease)
    redis.call('SET', KEYS[5], text .. ':1', 'PX', ARGV[3])
    return {1, token, 1}
  end
end
if got[1] then
  local count = redis.call('HINCRBY', KEYS[1], me, 1)
  redis.call('PEXPIRE', KEYS[1], lease, 'GT')
  local token = tonumber(got[2] or '0')
  redis.call('SET', KEYS[5], string.format('%d:%d', token, count), 'PX', ARGV[3])
  return {1, token, count}
end
local held = pttl
if pttl == -2 then held = -3 end
if ARGV[4] ~= 'wait' then return {0, held} end
local mine = redis.call('ZSCORE', KEYS[3], me)
if mine then
  return {0, math.max(1, math.min(tonumber(mine) - wait - now, 86400000))}
end
local last = redis.call('LINDEX', KEYS[2], -1)
local ttl
if last and last ~= me then
  ttl = tonumber(redis.call('ZSCORE', KEYS[3], last) or now) - now
else
  ttl = math.max(pttl, 0)
end
redis.call('ZADD', KEYS[3], string.format('%d', ttl + wait + now), me)
redis.call('RPUSH', KEYS[2], me)
return {0, held}
