-- redisson_release: leave one level of a hold taken by redisson_acquire.lua.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  Redisson's unlock channel, `redisson_lock__channel:{name}`
-- KEYS[3]  this request's replay record (lives ARGV[4] ms)
-- ARGV[1]  owner field
-- ARGV[2]  lease in ms to re-apply while still held, 0 to leave the TTL alone
--          (never shortens the current lease)
-- ARGV[3]  replay-record lifetime in ms (> 0)
-- ARGV[4]  the message to publish on KEYS[2] ("0", what Redisson's waiters
--          wake on)
-- ARGV[5]  the fencing token of the hold being released, or "" when unknown
-- ARGV[6]  "SPUBLISH" on a cluster, anything else for PUBLISH
-- ARGV[7]  "1" when this request was never sent before, anything else on a
--          re-send
-- (the ARGV of every release that wakes its waiters on the lock's channel,
-- as rw_release.lua's)
--
-- Returns 0 released (the hash deleted and ARGV[4] published on KEYS[2]),
-- n > 0 levels left, -1 not this hold (no field, or another token):
-- nothing changed.

if ARGV[7] ~= '1' then
  local rec = redis.call('GET', KEYS[3])
  if rec then return tonumber(rec) end
end
local got = redis.pcall('HMGET', KEYS[1], ARGV[1], ':token')
if got.err then return refused(got, 1) end
if not got[1] then return -1 end
if ARGV[5] ~= '' and tonumber(got[2] or '0') ~= tonumber(ARGV[5]) then return -1 end
local count = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if count > 0 then
  if tonumber(ARGV[2]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
  end
  redis.call('SET', KEYS[3], count, 'PX', ARGV[3])
  return count
end
redis.call('DEL', KEYS[1])
redis.pcall(ARGV[6] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH', KEYS[2], ARGV[4])
if ARGV[5] == '' then
  redis.call('SET', KEYS[3], 0, 'PX', ARGV[3])
end
return 0
