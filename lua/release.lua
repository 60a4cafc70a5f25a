-- release: leave one level of a reentrant hold.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's unlock channel
-- KEYS[3]  this request's replay record (lives ARGV[3] ms)
-- ARGV[1]  owner field "<client-uuid>:<owner-id>"
-- ARGV[2]  lease in ms to re-apply while still held, 0 to leave the TTL alone
--          (never shortens the current lease)
-- ARGV[3]  replay-record lifetime in ms (> 0)
-- ARGV[4]  message to publish on KEYS[2] when the lock becomes free
--
-- Returns
--   0    released: the owner's last level was removed and the unlock was published
--   n>0  still held by the owner with n levels left
--   -1   not held by this owner (expired, lost or never taken): nothing changed
--   error "WRONGTYPE <type>" when KEYS[1] is not a hash; nothing changed
--
-- Side effects: HINCRBY -1 of the owner's field; at zero the field is removed
-- (the hash, which has no other field, goes with it) and the channel is told.
-- KEYS[3] records the reply, so a replayed release never subtracts twice, even
-- the last level's (its re-send could otherwise meet a new hold of the same
-- owner).

local rec = redis.call('GET', KEYS[3])
if rec then
  return tonumber(rec)
end

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. kind)
end
if kind == 'none' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end

local count = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if count > 0 then
  if tonumber(ARGV[2]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
  end
else
  count = 0
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('PUBLISH', KEYS[2], ARGV[4])
end
redis.call('SET', KEYS[3], count, 'PX', ARGV[3])
return count
