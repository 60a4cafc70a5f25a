-- sem_available: a semaphore's permits now (read-only).
--
-- KEYS[1]  the semaphore hash (see sem_acquire.lua)
-- KEYS[2]  the number of permits stored with it (a string), if any
-- ARGV[1]  the caller's handle's number of permits (used while none is
--          stored)
-- ARGV[2]  the kind: 'semaphore' or 'fair-semaphore'
--
-- Returns {free, in use, number}: the number (KEYS[2], else ARGV[1])
-- minus the permits of holders whose lease has not ended (server time),
-- at least 0; the permits those holders have; the number. Error
-- "WRONGTYPE <type> <i>" when KEYS[i] is of another type,
-- "WRONGTYPE <foreign(1)> 1" when KEYS[1] is a hash lockwarden did not
-- write, "WRONGKIND <kind>" when another kind's (shared.lua).

local total = tonumber(ARGV[1])
local stored = redis.pcall('GET', KEYS[2])
if type(stored) == 'table' and stored.err then
  return redis.error_reply('WRONGTYPE ' .. redis.call('TYPE', KEYS[2])['ok'] .. ' 2')
end
if stored then
  total = tonumber(stored)
  if not total then return redis.error_reply('WRONGTYPE string 2') end
end
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return {total, 0, total} end
if kind ~= 'hash' then return redis.error_reply('WRONGTYPE ' .. kind .. ' 1') end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local f = {}
for i = 1, #all, 2 do f[all[i]] = all[i + 1] end
if #all > 0 then
  local other = wrong_kind(f[':kind'] or false, ARGV[2])
  if other then return other end
end
local used = 0
for k, v in pairs(f) do
  if string.sub(k, 1, 1) ~= ':' and tonumber(f[':' .. k] or '0') > now then
    used = used + tonumber(v)
  end
end
return {math.max(0, total - used), used, total}
