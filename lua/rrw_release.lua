-- rrw_release: leave one level of a hold taken by rrw_acquire.lua, with
-- Redisson's rules for what the hash becomes.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  Redisson's channel `redisson_rwlock:{name}`
-- KEYS[3]  this request's replay record (lives ARGV[3] ms)
-- ARGV[1..7] as every channel release's (see rw_release.lua): the caller's
--          field, a lease to re-apply (unused: each level keeps its own),
--          the record lifetime, the message (unused: Redisson's messages
--          are sent), the write hold's token or "", "SPUBLISH" or not, the
--          first-send flag
-- ARGV[8]  "read" or "write": the side
-- ARGV[9]  the timeout keys' prefix (see rrw_acquire.lua)
--
-- Returns 0 released, n > 0 levels left, -1 not this hold (no field; a
-- write hold of another token, or whose lease ended): nothing changed.
--
-- Side effects, as Redisson's unlock: the level's timeout key goes, and
-- the field with its last level. A writer's last release deletes the hash
-- when nothing else is in it and publishes "1" (Redisson wakes all its
-- waiters on it); with its owner's read holds left the mode becomes 'read'
-- (and "1" is published too: readers may come in). A reader's last release
-- sets the hash's TTL to the longest left of any hold's timeout keys; with
-- none left (or only 'mode'), the hash goes and "0" is published.

if ARGV[7] ~= '1' then
  local rec = redis.call('GET', KEYS[3])
  if rec then return tonumber(rec) end
end
local me, prefix, read = ARGV[1], ARGV[9], ARGV[8] == 'read'
local got = redis.pcall('HMGET', KEYS[1], 'mode', me)
if got.err then return refused(got, 1) end
if not got[1] or not got[2] then return -1 end
if not read then
  local token = redis.call('GET', level_key(prefix, me, 1))
  if not token or (ARGV[5] ~= '' and tonumber(token) ~= tonumber(ARGV[5])) then return -1 end
end
local count = redis.call('HINCRBY', KEYS[1], me, -1)
redis.call('DEL', level_key(prefix, me, count + 1))
if count > 0 then
  redis.call('SET', KEYS[3], count, 'PX', ARGV[3])
  return count
end
redis.call('HDEL', KEYS[1], me)
if not read then
  if redis.call('HLEN', KEYS[1]) == 1 then
    redis.call('DEL', KEYS[1])
  else
    redis.call('HSET', KEYS[1], 'mode', 'read')
  end
  wake(ARGV[6], '1')
else
  if redis.call('HLEN', KEYS[1]) > 1 then
    local left = longest(prefix)
    if left > 0 then
      redis.call('PEXPIRE', KEYS[1], left)
      return 0
    end
    if got[1] == 'write' then return 0 end
  end
  redis.call('DEL', KEYS[1])
  wake(ARGV[6], '0')
end
if ARGV[5] == '' then
  redis.call('SET', KEYS[3], 0, 'PX', ARGV[3])
end
return 0
