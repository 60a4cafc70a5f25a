-- sem_available: how many permits of a semaphore are free now (read-only).
--
-- KEYS[1]  the semaphore hash (see sem_acquire.lua)
-- ARGV[1]  the semaphore's number of permits
--
-- Returns ARGV[1] minus the permits of holders whose lease has not ended
-- (server time), at least 0; error "WRONGTYPE <type>" when KEYS[1] is not
-- a hash.

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return tonumber(ARGV[1]) end
if kind ~= 'hash' then return redis.error_reply('WRONGTYPE ' .. kind .. ' 1') end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local f = {}
for i = 1, #all, 2 do f[all[i]] = all[i + 1] end
if #all > 0 and f[':kind'] ~= 'semaphore' then
  if not f[':kind'] then return redis.error_reply('WRONGTYPE foreign-hash 1') end
  return redis.error_reply('WRONGKIND ' .. f[':kind'])
end
local used = 0
for k, v in pairs(f) do
  if string.sub(k, 1, 1) ~= ':' and tonumber(f[':' .. k] or '0') > now then
    used = used + tonumber(v)
  end
end
return math.max(0, tonumber(ARGV[1]) - used)
