-- rfair_release: leave one level of a hold of a fair lock in Redisson's
-- layout (see rfair_shared.lua); a last release wakes the head of the queue
-- on its own channel, as RFairLock's unlock does.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiters' list
-- KEYS[3]  the waiters' times
-- KEYS[4]  this request's replay record (lives ARGV[3] ms)
-- ARGV[1..7] as every channel release's (see rw_release.lua): the caller's
--          field, a lease to re-apply while levels remain (0: leave it),
--          the record lifetime, the message (unused: Redisson's "0" is
--          sent), the hold's token or "", "SPUBLISH" or not, the
--          first-send flag
-- ARGV[8]  the waiters' channel prefix `redisson_lock__channel:{name}:`
--
-- Returns 0 released, n > 0 levels left, -1 not this hold: nothing
-- changed but stale waiters leaving (and, when the lock is free, the head
-- woken, as Redisson's unlock does).

if ARGV[7] ~= '1' then
  local rec = redis.call('GET', KEYS[4])
  if rec then return tonumber(rec) end
end
local got = redis.pcall('HMGET', KEYS[1], ARGV[1], ':token')
if got.err then return refused(got, 1) end
drop_stale(2, 3, now_ms())
if redis.call('EXISTS', KEYS[1]) == 0 then
  wake_head(2, ARGV[8], ARGV[6])
  return -1
end
if not got[1] then return -1 end
if ARGV[5] ~= '' and tonumber(got[2] or '0') ~= tonumber(ARGV[5]) then return -1 end
local count = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if count > 0 then
  if tonumber(ARGV[2]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT') end
  redis.call('SET', KEYS[4], count, 'PX', ARGV[3])
  return count
end
redis.call('DEL', KEYS[1])
wake_head(2, ARGV[8], ARGV[6])
if ARGV[5] == '' then
  redis.call('SET', KEYS[4], 0, 'PX', ARGV[3])
end
return 0
