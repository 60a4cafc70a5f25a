-- rsem_count: the permits of a semaphore in Redisson's layout (see
-- rsem_shared.lua) now. Reads only.
--
-- KEYS[1]  the counter of free permits (the name)
-- KEYS[2]  the holds' sorted set (`{name}:timeout`)
-- ARGV[1]  the handle's number of permits (what the first acquire would
--          set the counter to)
--
-- Returns {free, held, free + held}: free counts the counter (or what the
-- first acquire would set it to) and the members whose deadline passed
-- (the next acquire reclaims them); held counts the live members. Holders
-- through Redisson's RSemaphore keep no record and are in neither.
-- Errors as rsem_acquire.lua's.

local count, refusal = counter()
if count == nil then return refusal end
local now = now_ms()
local live = redis.pcall('ZCOUNT', KEYS[2], '(' .. now, '+inf')
if type(live) == 'table' and live.err then return refused(live, 2) end
local expired = redis.call('ZCOUNT', KEYS[2], '-inf', now)
if not count then
  count = math.max(0, tonumber(ARGV[1]) - live - expired)
end
local free = math.max(0, count) + expired
return {free, live, free + live}
