-- renew: extend the leases of many held locks in one call (the watchdog).
--
-- KEYS[1..n]   lock hashes (one cluster slot per call)
-- ARGV[1]      lease in ms (> 0)
-- ARGV[2..n+1] the owner field expected in each KEYS[i]
--
-- Returns an array of n integers: 1 when KEYS[i] still has its owner's field
-- and its lease was extended, 0 when the field is gone (the lock was lost).
--
-- Side effects: PEXPIRE (never shortening) only where the owner's field exists; a lost lock is
-- never re-created and a key of another type is never touched (it reports 0).

local out = {}
for i = 1, #KEYS do
  local ok = redis.pcall('HEXISTS', KEYS[i], ARGV[i + 1])
  if ok == 1 then
    redis.call('PEXPIRE', KEYS[i], ARGV[1], 'GT')
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
