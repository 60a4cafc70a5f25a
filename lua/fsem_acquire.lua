-- fsem_acquire: take permits of a fair semaphore in request order, or
-- queue up. The fair semaphore is the semaphore's hash (each acquisition a
-- holder with its own lease, see sem_acquire.lua and shared_rw.lua, with
-- ':kind' 'fair-semaphore') and the fair lock's queue, deadlines and asks
-- (see fair_acquire.lua): permits go to the head of the queue only, so a
-- newcomer never takes them from a waiter that asked first, and releases
-- hand them straight to the head (fsem_release.lua).
--
-- KEYS[1]  the semaphore hash
-- KEYS[2]  the waiter queue (list of permit ids, head first)
-- KEYS[3]  the waiter deadlines (sorted set: permit id -> server ms)
-- KEYS[4]  this wait's request record (a release's direct grant: "g")
-- KEYS[5]  the waiters' grant asks (hash: permit id -> "<deadline ms>
--          <permits> <lease ms> <record ms> <request id> <attempt> <wake
--          id>")
-- KEYS[6]  the number of permits stored with the semaphore, if any
-- ARGV[1]  the permit id "<client-uuid>:p<n>:r"
-- ARGV[2]  permits to take (>= 1)
-- ARGV[3]  the handle's number of permits (used while none is stored)
-- ARGV[4]  lease in ms (> 0)
-- ARGV[5]  waiter timeout in ms: a queued waiter that has not refreshed
--          its deadline for this long is evicted
-- ARGV[6]  replay-record lifetime in ms
-- ARGV[7]  "wait" to join the queue (or refresh its deadline) if refused,
--          "try" to only try
-- ARGV[8]  prefix of the waiters' wake channels
-- ARGV[9]  PUBLISH, or SPUBLISH on a cluster
-- ARGV[10] with "wait": this waiter's ask "<lease ms> <record ms> <request
--          id> <attempt> <wake id>" (so a release can grant it directly;
--          the attempt is the waiter's number for this attempt, named back
--          in the grant's message), "" for none
-- ARGV[11] how long the queue keys live past a waiter's refresh, in ms
-- ARGV[12] the attempt's request id (KEYS[4] is its record)
--
-- Returns {1, 0, 1} granted (or granted already: a re-send, or a release's
-- direct grant to this wait, whose lease this sets, never shortening);
-- {0, ms} not enough permits free: ms until the first holder's lease
-- ends; {0, -3} enough are free but other waiters are ahead (the head is
-- woken, in case its message was lost). Errors as sem_acquire.lua.

local me, take, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local publish = ARGV[9] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'
local now = now_ms()
local rec = redis.call('GET', KEYS[4])
if rec == 'left' then
  return {0, -3}
end
if rec == 'g' then
  -- A release granted this wait its permits (its message may be lost):
  -- while they are held, they get this wait's own lease.
  local held = redis.pcall('HMGET', KEYS[1], me, ':' .. me, ':q:' .. me)
  if not held.err and held[1] and held[3] == ARGV[12] and tonumber(held[2]) > now then
    if tonumber(held[2]) < now + lease then
      redis.call('HSET', KEYS[1], ':' .. me, string.format('%d', now + lease))
    end
    redis.call('PEXPIRE', KEYS[1], lease, 'GT')
    return {1, 0, 1}
  end
end
local s, refusal = snapshot(now, 'fair-semaphore')
if not s then return refusal end
local total = tonumber(ARGV[3])
local stored = redis.pcall('GET', KEYS[6])
if type(stored) == 'table' and stored.err then return refused(stored, 6) end
if stored then
  total = tonumber(stored)
  if not total then return redis.error_reply('WRONGTYPE string 6') end
end
if s.f[me] then
  if s.f[':q:' .. me] == ARGV[12] then
    return {1, 0, 1}
  end
  -- Another attempt's grant of this acquisition (its reply was lost, and
  -- its re-send gives it back): a holder like any other until then.
  return {0, s.soonest or 1}
end
local used = 0
for k, v in pairs(s.f) do
  if string.sub(k, 1, 1) ~= ':' and is_reader(k) then used = used + tonumber(v) end
end
-- Waiters whose deadline passed leave the queue first.
local stale = redis.pcall('ZRANGEBYSCORE', KEYS[3], '-inf', now)
if stale.err then return refused(stale, 3) end
local head = redis.pcall('LINDEX', KEYS[2], 0)
if type(head) == 'table' and head.err then return refused(head, 2) end
for _, id in ipairs(stale) do
  redis.call('LREM', KEYS[2], 0, id)
  redis.call('ZREM', KEYS[3], id)
  redis.pcall('HDEL', KEYS[5], id)
end
if #stale > 0 then
  head = redis.call('LINDEX', KEYS[2], 0)
end

local function wake(id)
  local ask = redis.pcall('HGET', KEYS[5], id)
  local channel = type(ask) == 'string' and string.match(ask, ' (%S+)$') or id
  redis.pcall(publish, ARGV[8] .. channel, '0')
end

if (not head or head == me) and used + take <= total then
  redis.call('HSET', KEYS[1], me, take, ':' .. me, string.format('%d', now + lease), ':q:' .. me, ARGV[12],
    ':kind', 'fair-semaphore')
  cover(s, lease)
  if head then
    redis.call('LPOP', KEYS[2])
    redis.call('ZREM', KEYS[3], me)
    redis.pcall('HDEL', KEYS[5], me)
    -- Permits left over go to the next in line.
    local next = redis.call('LINDEX', KEYS[2], 0)
    if next and used + take < total then wake(next) end
  end
  return {1, 0, 1}
end
if ARGV[7] == 'wait' then
  local deadline = string.format('%d', now + tonumber(ARGV[5]))
  local added = redis.pcall('ZADD', KEYS[3], deadline, me)
  if type(added) == 'table' then return refused(added, 3) end
  if added == 1 then
    local pushed = redis.pcall('RPUSH', KEYS[2], me)
    if type(pushed) == 'table' then
      redis.call('ZREM', KEYS[3], me)
      return refused(pushed, 2)
    end
    if not head then head = me end
  end
  if ARGV[10] ~= '' then
    local asked = redis.pcall('HSET', KEYS[5], me, deadline .. ' ' .. take .. ' ' .. ARGV[10])
    if type(asked) == 'table' then
      if added == 1 then
        redis.call('ZREM', KEYS[3], me)
        redis.call('LREM', KEYS[2], -1, me)
      end
      return refused(asked, 5)
    end
    redis.call('PEXPIRE', KEYS[5], ARGV[11])
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[11])
  redis.call('PEXPIRE', KEYS[3], ARGV[11])
end
if used + take <= total then
  if head and head ~= me then wake(head) end
  return {0, -3}
end
return {0, s.soonest or 1}
