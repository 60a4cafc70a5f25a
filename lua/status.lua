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
-- KEYS[4]  Redisson's set of expiring permits for the name, `{name}:timeout`
--          (see rsem_shared.lua)
--   error "WRONGTYPE <type>" when KEYS[1] is not a hash, nor a counter of
--   free permits (a number) beside a set at KEYS[4].
--
-- A Redisson semaphore (a number at KEYS[1]) reads as a hash would: each
-- live member of KEYS[4] a holder with count 1, ':kind' =
-- 'redisson-semaphore', ':free' = the counter; pttl the time to the latest
-- member's deadline (-2 without one).

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'string' and tonumber(redis.call('GET', KEYS[1])) then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local live = redis.pcall('ZRANGEBYSCORE', KEYS[4], '(' .. now, '+inf', 'WITHSCORES')
  if live.err then live = {} end
  local flat = {':kind', 'redisson-semaphore', ':free', redis.call('GET', KEYS[1])}
  local last = -2
  for i = 1, #live, 2 do
    flat[#flat + 1] = live[i]
    flat[#flat + 1] = '1'
    last = math.max(last, tonumber(live[i + 1]) - now)
  end
  return {flat, last, false, {}}
end
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
