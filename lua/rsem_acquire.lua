-- rsem_acquire: take permits of a semaphore in Redisson's layout (see
-- rsem_shared.lua), so that Redisson's RSemaphore and
-- RPermitExpirableSemaphore and lockwarden count one set of permits.
--
-- KEYS[1]  the counter of free permits (the name)
-- KEYS[2]  the holds' sorted set (`{name}:timeout`)
-- KEYS[3]  Redisson's channel `redisson_sc:{name}`
-- KEYS[4]  this request's grant record (lives ARGV[6] ms): it exists once
--          this request got the acquisition's permits
-- ARGV[1]  the permit id "<client-uuid>:p<n>:r" (one per acquisition)
-- ARGV[2]  permits to take (>= 1)
-- ARGV[3]  the handle's number of permits: the counter's first value when
--          there is none (less the permits held by members of KEYS[2]), as
--          Redisson's trySetPermits would set it
-- ARGV[4]  lease in ms (> 0)
-- ARGV[5]  record lifetime in ms (> 0)
-- ARGV[6]  "SPUBLISH" on a cluster, anything else for PUBLISH
--
-- Returns
--   {1, 0, 1}   granted (a re-send of the request that got the grant finds
--               it through its record)
--   {0, ms}     not enough permits free: ms until the first member's
--               deadline (when a permit may come back without a release),
--               -1 when no member has one (RSemaphore's holders keep none)
--   error "WRONGKIND <kind>" / "WRONGTYPE <what> <i>" (see counter() in
--   rsem_shared.lua, and KEYS[2] of another type); nothing changed
--
-- Side effects: members whose deadline passed are reclaimed first (at most
-- 100 per call): removed, the counter raised by their number and the new
-- count published. A grant lowers the counter by ARGV[2], adds the members
-- with deadline now + lease, and records the request. Permits are never
-- granted beyond the counter.

local me, take, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local count, refusal = counter()
if count == nil then return refusal end
local mine = redis.pcall('ZSCORE', KEYS[2], me)
if type(mine) == 'table' and mine.err then return refused(mine, 2) end
local now = now_ms()

local function soonest()
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if not first[2] then return -1 end
  return math.max(1, math.min(tonumber(first[2]) - now, 86400000))
end

if mine then
  if redis.call('EXISTS', KEYS[4]) == 1 then return {1, 0, 1} end
  -- Another attempt of this acquisition got the grant and its reply was
  -- lost: that request's re-send gives it back; until then it holds.
  return {0, soonest()}
end
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)
if #gone > 0 then
  redis.call('ZREM', KEYS[2], unpack(gone))
  if count then
    count = redis.call('INCRBY', KEYS[1], #gone)
    announce(count, ARGV[6])
  end
end
if not count then
  count = math.max(0, tonumber(ARGV[3]) - redis.call('ZCARD', KEYS[2]))
  redis.call('SET', KEYS[1], string.format('%d', count))
end
if count < take then return {0, soonest()} end
redis.call('DECRBY', KEYS[1], take)
local deadline = string.format('%d', now + lease)
redis.call('ZADD', KEYS[2], deadline, me)
for j = 2, take do
  redis.call('ZADD', KEYS[2], deadline, me .. '#' .. j)
end
redis.call('SET', KEYS[4], '1', 'PX', ARGV[5])
return {1, 0, 1}
