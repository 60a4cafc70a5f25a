-- rsem_permits: set or change the number of permits of a semaphore in
-- Redisson's layout (see rsem_shared.lua). Redisson keeps no total, only
-- the count of free permits, so both act on the counter.
--
-- KEYS[1]  the counter of free permits (the name)
-- KEYS[2]  the holds' sorted set (`{name}:timeout`)
-- KEYS[3]  Redisson's channel `redisson_sc:{name}`
-- ARGV[1]  "set": store ARGV[2] permits unless a counter is there (Redisson's
--          trySetPermits; the members held count against them); "add": add
--          ARGV[2] (negative: remove) free permits, never leaving fewer
--          than none free (a missing counter is first set from ARGV[3])
-- ARGV[2]  the number, or the change
-- ARGV[3]  the handle's number of permits
-- ARGV[4]  "SPUBLISH" on a cluster, anything else for PUBLISH
-- KEYS[4]  this call's replay record (lives ARGV[5] ms): a call sent again
--          after its connection broke before the reply gets the first
--          sending's reply and changes nothing (an "add" is not made twice)
-- ARGV[5]  the replay record's lifetime in ms
-- ARGV[6]  "1" when this call was never sent before, anything else on a
--          re-send
--
-- Returns {1, n} done or {0, n} refused (a counter is there; the change
-- would leave fewer than none free), n the number of permits now: free
-- plus held by members. A change publishes the new count (waking waiters).
-- Errors as rsem_acquire.lua's.

local again = replayed(4, ARGV[6])
if again then return again end
local function done(reply) return answer(4, ARGV[5], reply) end

local count, refusal = counter()
if count == nil then return refusal end
local held = redis.pcall('ZCARD', KEYS[2])
if type(held) == 'table' and held.err then return refused(held, 2) end
local n = tonumber(ARGV[2])
if ARGV[1] == 'set' then
  if count then return done({0, count + held}) end
  count = math.max(0, n - held)
  redis.call('SET', KEYS[1], string.format('%d', count))
  announce(count, ARGV[4])
  return done({1, count + held})
end
local stored = count
if not count then
  count = math.max(0, tonumber(ARGV[3]) - held)
end
if count + n < 0 then return done({0, count + held}) end
if stored then
  count = redis.call('INCRBY', KEYS[1], n)
else
  count = count + n
  redis.call('SET', KEYS[1], string.format('%d', count))
end
announce(count, ARGV[4])
return done({1, count + held})
