-- force_unlock: delete a lock whoever holds it, and wake its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's unlock channel
-- ARGV[1]  message to publish on KEYS[2]
--
-- Returns 1 when a lock was deleted, 0 when there was none.
--   error "WRONGTYPE <type>" when KEYS[1] is not a hash; nothing is deleted
--
-- Side effects: DEL of KEYS[1] and a PUBLISH on KEYS[2] when it existed.
-- The fencing-token counter is kept, so tokens keep increasing.

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return 0
end
if kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. kind)
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], ARGV[1])
return 1
