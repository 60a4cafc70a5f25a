-- rrw_acquire: take or re-enter one side of a read-write lock in Redisson's
-- layout (see rrw_shared.lua), so that Redisson's RReadWriteLock and
-- lockwarden share one name: many readers or one writer, across both.
--
-- KEYS[1]  the lock hash (Redisson's, at the name)
-- KEYS[2]  the write side's fencing-token counter (lockwarden's own key,
--          which Redisson ignores)
-- KEYS[3]  this request's replay record (lives ARGV[3] ms)
-- ARGV[1]  the caller's field: "<client-uuid>:<owner-id>" for the read side,
--          the same followed by ":write" for the write side (Redisson's
--          forms)
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  replay-record lifetime in ms (> 0)
-- ARGV[4]  "1" when this request was never sent before, anything else on a
--          re-send
-- ARGV[5]  "read" or "write": the side
-- ARGV[6]  the timeout keys' prefix: the name in braces (or as it is when it
--          has a brace)
--
-- Returns
--   {1, token, count}  acquired at reentry depth count: a write hold's token
--                      is fresh (count 1) or its own; a read hold carries
--                      the counter's value (the last write token, 0 when
--                      none)
--   {0, pttl}          refused: the hash's remaining lease
--   error "DEADLOCK"   the write side asked by an owner that holds the read
--                      side and not the write side
--   error "WRONGKIND <kind>" for a lockwarden lock of its own layout,
--   "WRONGTYPE redisson-lock 1" for Redisson's plain lock (or the like, see
--   foreign in shared.lua), "WRONGTYPE <type> <i>" for another type;
--   nothing changed
--
-- Redisson's rules: a reader gets in while the mode is 'read', or while
-- its owner holds the write side (mode 'write'); a writer only into a free
-- name or its own write hold. No writer preference: there is no place for
-- a waiting writer's mark in Redisson's hash. Every level writes its
-- timeout key with the lease; the hash's TTL is raised to cover it.

if ARGV[4] ~= '1' then
  local replayed = recorded(3)
  if replayed then return replayed end
end
local me, lease, read, prefix = ARGV[1], tonumber(ARGV[2]), ARGV[5] == 'read', ARGV[6]
local got = redis.pcall('HMGET', KEYS[1], 'mode', ':kind')
if got.err then return refused(got, 1) end
if got[2] then return redis.error_reply('WRONGKIND ' .. got[2]) end
local mode = got[1]
local pttl = redis.call('PTTL', KEYS[1])
if not mode and pttl ~= -2 then
  return redis.error_reply('WRONGTYPE ' .. foreign(1) .. ' 1')
end
if mode and mode ~= 'read' and mode ~= 'write' then
  return redis.error_reply('WRONGTYPE foreign-hash 1')
end

local function hold(count, token)
  local text = string.format('%d', token)
  redis.call('SET', level_key(prefix, me, count), text, 'PX', lease)
  if pttl < lease then redis.call('PEXPIRE', KEYS[1], lease) end
  redis.call('SET', KEYS[3], text .. ':' .. count, 'PX', ARGV[3])
  return {1, token, count}
end

local function carried()
  local t = redis.pcall('GET', KEYS[2])
  if type(t) ~= 'string' then return 0 end
  return tonumber(t) or 0
end

if read then
  local writer = me .. ':write'
  if not mode or mode == 'read' or redis.call('HEXISTS', KEYS[1], writer) == 1 then
    if not mode then redis.call('HSET', KEYS[1], 'mode', 'read') end
    return hold(redis.call('HINCRBY', KEYS[1], me, 1), carried())
  end
  return {0, pttl}
end

if not mode then
  local token, refusal = next_token(2)
  if not token then return refusal end
  redis.call('HSET', KEYS[1], 'mode', 'write', me, 1)
  return hold(1, token)
end
if mode == 'write' and redis.call('HEXISTS', KEYS[1], me) == 1 then
  local token = tonumber(redis.call('GET', level_key(prefix, me, 1)) or '0') or 0
  return hold(redis.call('HINCRBY', KEYS[1], me, 1), token)
end
local reader = string.sub(me, 1, -7)
if redis.call('HEXISTS', KEYS[1], reader) == 1 then
  return redis.error_reply('DEADLOCK the caller holds the read side')
end
return {0, pttl}
