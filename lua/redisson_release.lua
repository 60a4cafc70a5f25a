-- redisson_release: leave one level of a hold taken by redisson_acquire.lua.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  Redisson's unlock channel, `redisson_lock__channel:{name}`
-- KEYS[3]  this request's replay record (lives ARGV[4] ms)
-- ARGV[1]  owner field
-- ARGV[2]  the fencing token of the hold being released, or "" when unknown
-- ARGV[3]  lease in ms to re-apply while still held, 0 to leave the TTL alone
--          (never shortens the current lease)
-- ARGV[4]  replay-record lifetime in ms (> 0)
-- ARGV[5]  "SPUBLISH" on a cluster, anything else for PUBLISH
-- ARGV[6]  "1" when this request was never sent before, anything else on a
--          re-send
--
-- Returns 0 released (the hash deleted and "0" published on KEYS[2], the
-- message Redisson's waiters wake on), n > 0 levels left, -1 not this hold
-- (no field, or another token): nothing changed.

if ARGV[6] ~= '1' then
  local rec = redis.call('GET', KEYS[3])
  if rec then return tonumber(rec) end
end
local got = redis.pcall('HMGET', KEYS[1], ARGV[1], ':token')
if got.err then return refused(got, 1) end
if not got[1] then return -1 end
if ARGV[2] ~= '' and tonumber(got[2] or '0') ~= tonumber(ARGV[2]) then return -1 end
local count = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if count > 0 then
  if tonumber(ARGV[3]) > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[3], 'GT')
  end
  redis.call('SET', KEYS[3], count, 'PX', ARGV[4])
  return count
end
redis.call('DEL', KEYS[1])
redis.pcall(ARGV[5] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH', KEYS[2], '0')
if ARGV[2] == '' then
  redis.call('SET', KEYS[3], 0, 'PX', ARGV[4])
end
return 0
