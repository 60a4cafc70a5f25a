-- status: a consistent snapshot of one lock (read-only).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's fencing-token counter
-- KEYS[3]  the fair lock's waiter queue (absent for a non-fair lock)
--
-- Returns {holders, pttl, token, queue}: holders is the flat HGETALL of the
-- lock (owner field, count, ..., and the hold's own fields, whose names
-- start with ':', see shared_acquire.lua), pttl its PTTL (-2 free, -1 no TTL), token
-- the last fencing token handed out (false when none), queue the waiting
-- owner fields, head first.
--   error "WRONGTYPE <type>" when KEYS[1] is not a hash.

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. kind .. ' 1')
end
local token = redis.pcall('GET', KEYS[2])
if type(token) == 'table' then
  token = false
end
local queue = redis.pcall('LRANGE', KEYS[3], 0, -1)
if queue.err then
  queue = {}
end
return {redis.call('HGETALL', KEYS[1]), redis.call('PTTL', KEYS[1]), token, queue}
