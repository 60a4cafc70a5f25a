-- elect_read: an election's leader and, for its observers, its log
-- (read-only).
--
-- KEYS[1]  the election's lock hash
-- KEYS[2]  the election's log of proclaimed leaders (a stream)
-- ARGV[1]  ''     the leader only
--          '$'    the leader and the log's last entry id
--          an id  the leader, the log's last entry id and its entries
--                 after that id (at most 100, oldest first)
--
-- Returns {value, term, last id, entries}: value and term are false when
-- nobody leads (the lock is free, or held by someone who has not said a
-- value), last id false when the log is empty or gone; each entry is
-- {id, {'term', term, 'value', value}}.
-- Errors "WRONGTYPE <type> <i>" when KEYS[i] is of another type.

local held = redis.call('TYPE', KEYS[1])['ok']
if held ~= 'none' and held ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. held .. ' 1')
end
local value, term = false, false
if held == 'hash' then
  local r = redis.call('HMGET', KEYS[1], ':value', ':token')
  if r[1] and r[2] then
    value, term = r[1], r[2]
  end
end
local last, entries = false, {}
if ARGV[1] ~= '' then
  local log = redis.call('TYPE', KEYS[2])['ok']
  if log ~= 'none' and log ~= 'stream' then
    return redis.error_reply('WRONGTYPE ' .. log .. ' 2')
  end
  if log == 'stream' then
    local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
    if #top > 0 then
      last = top[1][1]
    end
    if ARGV[1] ~= '$' then
      entries = redis.call('XRANGE', KEYS[2], '(' .. ARGV[1], '+', 'COUNT', 100)
    end
  end
end
return {value, term, last, entries}
