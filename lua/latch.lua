-- latch: a count-down latch's three calls (after shared.lua).
--
-- KEYS[1]  the latch hash: ':kind' 'latch', ':count' (what is left),
--          ':gen' (this count's generation: a fencing token of the
--          name's counter, so generations only grow, across a FLUSHALL
--          too), ':zeroed' (the generation that reached zero before this
--          one was set, when it was set from zero)
-- KEYS[2]  the name's token counter (lockwarden:{PN}:token)
-- ARGV[1]  'set': set the count to ARGV[2] if the latch is at zero or
--                 absent; publishes '1' on ARGV[3] (with ARGV[4])
--          'down': one less, if above zero; publishes '0' when it
--                 reaches zero
--          'read': the state
--          'delete': deletes the latch (its waiters are told it is gone)
-- KEYS[3]  this call's replay record (set, down and delete; lives ARGV[5]
--          ms): the client sends a call again when its connection broke
--          before the reply, and the second sending must not count down
--          (or set) a second time; it returns the first one's reply
-- ARGV[2]  the count to set (>= 1)
-- ARGV[3]  the latch's channel
-- ARGV[4]  PUBLISH, or SPUBLISH on a cluster
-- ARGV[5]  the replay record's lifetime in ms (> 0)
-- ARGV[6]  "1" when this call was never sent before (no record is read),
--          anything else on a re-send
--
-- Replies:
--   set   {1, gen} set; {0, gen} refused: still counting (gen: the one
--         counting)
--   down  {count left, gen}; {-1} when there is no latch (never set, or
--         its key was lost): nothing is written
--   read  {count, gen, zeroed (0 when none)}; {-1} when there is none
--   delete {1} deleted; {0} there was none
-- Errors: "WRONGTYPE <type> <i>" for a key of another type, "WRONGKIND
-- <kind>" for a name held by another lockwarden kind; nothing is written.
-- The latch has no TTL (as Redisson's): it lives until deleted.

local op = ARGV[1]
if op ~= 'read' then
  local again = replayed(3, ARGV[6])
  if again then return again end
end
local function done(reply) return answer(3, ARGV[5], reply) end

local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then
  return redis.error_reply('WRONGTYPE ' .. t .. ' 1')
end
local count, gen, zeroed = nil, nil, nil
if t == 'hash' then
  local r = redis.call('HMGET', KEYS[1], ':kind', ':count', ':gen', ':zeroed')
  local refusal = wrong_kind(r[1], 'latch')
  if refusal then return refusal end
  count, gen, zeroed = tonumber(r[2]), tonumber(r[3]), tonumber(r[4] or '0')
end
if op == 'read' then
  if not count then return {-1} end
  return {count, gen, zeroed}
end
if op == 'delete' then
  if not count then return done({0}) end
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[4], ARGV[3], '0')
  return done({1})
end
if op == 'down' then
  if not count then return done({-1}) end
  if count == 0 then return done({0, gen}) end
  count = count - 1
  redis.call('HSET', KEYS[1], ':count', count)
  if count == 0 then
    redis.call(ARGV[4], ARGV[3], '0')
  end
  return done({count, gen})
end
-- set
if count and count > 0 then return done({0, gen}) end
local next, refusal = next_token(2)
if not next then return refusal end
if count then
  redis.call('HSET', KEYS[1], ':count', ARGV[2], ':gen', next, ':zeroed', gen)
else
  redis.call('HSET', KEYS[1], ':kind', 'latch', ':count', ARGV[2], ':gen', next)
end
redis.call(ARGV[4], ARGV[3], '1')
return done({1, next})
