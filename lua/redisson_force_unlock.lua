-- redisson_force_unlock: free a lock in Redisson's layout whoever holds it,
-- Redisson's client or lockwarden's, and wake its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  Redisson's unlock channel, `redisson_lock__channel:{name}`
-- ARGV[1]  "SPUBLISH" on a cluster, anything else for PUBLISH
--
-- Returns 1 when a lock was deleted (and "0" published on KEYS[2]), 0 when
-- there was none. error "WRONGTYPE <type> 1" when KEYS[1] is not a hash,
-- "WRONGTYPE foreign-hash 1" for a hash that is no Redisson lock,
-- "WRONGKIND <kind>" for a lockwarden lock of its own layout; nothing is
-- deleted.

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return 0 end
if kind ~= 'hash' then return redis.error_reply('WRONGTYPE ' .. kind .. ' 1') end
local own = redis.call('HGET', KEYS[1], ':kind')
if own then return redis.error_reply('WRONGKIND ' .. own) end
if foreign(1) ~= 'redisson-lock' then
  return redis.error_reply('WRONGTYPE foreign-hash 1')
end
redis.call('DEL', KEYS[1])
redis.pcall(ARGV[1] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH', KEYS[2], '0')
return 1
