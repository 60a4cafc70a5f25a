-- elect_proclaim: the leader of an election says its value. The leader is
-- the holder of the election's lock; the value is kept in the lock's hash
-- (field ':value'), so it lives and ends with the hold, and each change is
-- appended to the election's log and announced on its channel.
--
-- KEYS[1]  the election's lock hash
-- KEYS[2]  the election's log of proclaimed leaders (a stream)
-- ARGV[1]  the leader's owner field
-- ARGV[2]  the value
-- ARGV[3]  the election's channel
-- ARGV[4]  PUBLISH, or SPUBLISH on a cluster
-- ARGV[5]  how long the log lives after its last entry (ms)
-- ARGV[6]  the leadership's term; optional ("" or absent: any): a hold of
--          the same owner with another token is another hold (a later
--          take of the owner), not this leadership's
--
-- Returns the term (the hold's fencing token), or -1 when ARGV[1] does not
-- hold the lock under the term ARGV[6] (the leadership was lost or
-- resigned): nothing is written.
-- Errors "WRONGTYPE <type> <i>" when KEYS[i] is of another type: nothing
-- is written either. A re-sent call appends the same entry twice; readers
-- of the log skip an entry equal to the one before it.

local held = redis.call('TYPE', KEYS[1])['ok']
if held ~= 'none' and held ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. held .. ' 1')
end
local log = redis.call('TYPE', KEYS[2])['ok']
if log ~= 'none' and log ~= 'stream' then
  return redis.error_reply('WRONGTYPE ' .. log .. ' 2')
end
if held == 'none' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local term = redis.call('HGET', KEYS[1], ':token')
if ARGV[6] and ARGV[6] ~= '' and term ~= ARGV[6] then
  return -1
end
redis.call('HSET', KEYS[1], ':value', ARGV[2])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', '100', '*', 'term', term, 'value', ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call(ARGV[4], ARGV[3], term)
return tonumber(term)
