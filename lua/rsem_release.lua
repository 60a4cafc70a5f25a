-- rsem_release: give back the permits of one acquisition of a semaphore in
-- Redisson's layout (see rsem_shared.lua).
--
-- KEYS[1]  the counter of free permits (the name)
-- KEYS[2]  the holds' sorted set (`{name}:timeout`)
-- KEYS[3]  Redisson's channel `redisson_sc:{name}`
-- ARGV[1]  the acquisition's id: a lockwarden permit id, or the raw id of a
--          Redisson permit
-- ARGV[2]  "SPUBLISH" on a cluster, anything else for PUBLISH
--
-- Returns 0 released; -1 not held: no member of that id (released, or
-- reclaimed after its deadline), or one whose deadline had passed (its
-- permits are given back all the same, as Redisson's release does); a
-- re-send finds nothing and changes nothing. Errors as rsem_acquire.lua's.
--
-- Side effects: the acquisition's members are removed, the counter raised
-- by their number and the new count published. A counter that is not there
-- (lost with the server's data) is not made up here: the next acquire
-- counts from the handle's number and the remaining members.

local count, refusal = counter()
if count == nil then return refusal end
local score = redis.pcall('ZSCORE', KEYS[2], ARGV[1])
if type(score) == 'table' and score.err then return refused(score, 2) end
if not score then return -1 end
local all = members(ARGV[1])
redis.call('ZREM', KEYS[2], unpack(all))
if count then
  announce(redis.call('INCRBY', KEYS[1], #all), ARGV[2])
end
if tonumber(score) <= now_ms() then return -1 end
return 0
