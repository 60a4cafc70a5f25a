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
-- A hold with a lease of its own (a read-write lock's reader: the field
-- ':' .. owner field holds its deadline in server ms, see shared_rw.lua)
-- also gets its deadline moved to now + lease when that is later (never
-- shortened: a hold extended by its holder to a longer lease keeps it);
-- one whose deadline passed is gone: its fields are removed and it
-- reports 0.

local out = {}
local now
for i = 1, #KEYS do
  local field = ARGV[i + 1]
  local got = redis.pcall('HMGET', KEYS[i], field, ':' .. field)
  if got.err or not got[1] then
    out[i] = 0
  elseif got[2] then
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    if tonumber(got[2]) <= now then
      redis.call('HDEL', KEYS[i], field, ':' .. field)
      out[i] = 0
    else
      if tonumber(got[2]) < now + tonumber(ARGV[1]) then
        redis.call('HSET', KEYS[i], ':' .. field, string.format('%d', now + tonumber(ARGV[1])))
      end
      redis.call('PEXPIRE', KEYS[i], ARGV[1], 'GT')
      out[i] = 1
    end
  else
    redis.call('PEXPIRE', KEYS[i], ARGV[1], 'GT')
    out[i] = 1
  end
end
return out
