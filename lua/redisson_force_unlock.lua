-- redisson_force_unlock: free a lock in Redisson's layout whoever holds it,
-- Redisson's client or lockwarden's, and wake its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  Redisson's unlock channel, `redisson_lock__channel:{name}`
-- ARGV[1]  "SPUBLISH" on a cluster, anything else for PUBLISH
-- KEYS[3]  this call's replay record (lives ARGV[2] ms): a force-unlock
--          sent again after its connection broke before the reply gets
--          the first sending's reply and deletes nothing (a lock taken
--          since the first sending is not freed by it)
-- ARGV[2]  the replay record's lifetime in ms
-- ARGV[3]  "1" when this call was never sent before, anything else on a
--          re-send
--
-- Returns 1 when a lock was deleted (and "0" published on KEYS[2]), 0 when
-- there was none. error "WRONGTYPE <type> 1" when KEYS[1] is not a hash,
-- "WRONGTYPE foreign-hash 1" for a hash that is no Redisson lock,
-- "WRONGKIND <kind>" for a lockwarden lock of its own layout; nothing is
-- deleted.

if KEYS[3] then
  local again = replayed(3, ARGV[3])
  if again then return again[1] end
end
local function done(n)
  if KEYS[3] then answer(3, ARGV[2], {n}) end
  return n
end

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return done(0) end
if kind ~= 'hash' then return redis.error_reply('WRONGTYPE ' .. kind .. ' 1') end
local own = redis.call('HGET', KEYS[1], ':kind')
if own then return redis.error_reply('WRONGKIND ' .. own) end
if foreign(1) ~= 'redisson-lock' then
  return redis.error_reply('WRONGTYPE foreign-hash 1')
end
redis.call('DEL', KEYS[1])
redis.pcall(ARGV[1] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH', KEYS[2], '0')
return done(1)
