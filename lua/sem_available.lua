-- sem_available: how many permits of a semaphore are free now (read-only).
--
-- KEYS[1]  the semaphore hash (see sem_acquire.lua)
-- ARGV[1]  the semaphore's number of permits
--
-- Returns ARGV[1] minus the permits of holders whose lease has not ended
-- (server time), at least 0; error "WRONGTYPE <type> 1" when KEYS[1] is not
-- a hash, "WRONGTYPE <foreign(1)> 1" when it is a hash lockwarden did not
-- write, "WRONGKIND <kind>" when another kind's (shared.lua).

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return tonumber(ARGV[1]) end
if kind ~= 'hash' then return redis.error_reply('WRONGTYPE ' .. kind .. ' 1') end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local f = {}
for i = 1, #all, 2 do f[all[i]] = all[i + 1] end
if #all > 0 then
  local other = wrong_kind(f[':kind'] or false, 'semaphore')
  if other then return other end
end
local used = 0
for k, v in pairs(f) do
  if string.sub(k, 1, 1) ~= ':' and tonumber(f[':' .. k] or '0') > now then
    used = used + tonumber(v)
  end
end
return math.max(0, tonumber(ARGV[1]) - used)
