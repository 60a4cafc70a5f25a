-- fair_leave: a waiter gives up (timed out, cancelled) and leaves the queue.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiter queue
-- KEYS[3]  the waiter deadlines
-- KEYS[4]  the lock's fencing-token counter
-- KEYS[5]  the waiters' grant asks (see fair_release.lua)
-- KEYS[6]  optional: the request record of the wait that gives up (its
--          ask's request id)
-- ARGV[1]  owner field of the waiter
-- ARGV[2]  prefix of the waiters' wake channels
-- ARGV[3]  "SPUBLISH" on a cluster (sharded pub/sub: the channels share the
--          lock's slot), anything else for PUBLISH
-- ARGV[4..] optional: every request id the leaving wait's asks named (its
--          current one and those it gave up on after an unknown outcome)
--
-- Returns 1 when the waiter was queued or held an unclaimed grant, 0 when
-- neither. Idempotent.
--
-- Side effects: LREM, ZREM and HDEL (ask) of the waiter, unless its ask
-- names a request not in ARGV[4..]: then the place is a later wait's of
-- the same owner (this leave came late), and it stays. An unlock may have
-- granted the lock to this wait (KEYS[6] says "<token>:1:g") without the
-- waiter learning of it: while that hold is still the lock's latest
-- (token), one level of it is given back, and the record becomes "left"
-- so neither a second leave nor a replayed attempt counts it again. When
-- the waiter was the head, or its grant freed the lock, and the lock is
-- free, the new head is woken so the lock does not sit idle.

local publish = ARGV[3] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

local head = redis.pcall('LINDEX', KEYS[2], 0)
if type(head) == 'table' then
  return refused(head, 2)
end
local mine = true
if ARGV[4] then
  local ask = redis.pcall('HGET', KEYS[5], ARGV[1])
  local id = type(ask) == 'string' and string.match(ask, '^%d+ %d+ %d+ (%S+) ')
  if id then
    mine = false
    for i = 4, #ARGV do
      if ARGV[i] == id then mine = true end
    end
  end
end
local removed = 0
if mine then
  removed = redis.call('LREM', KEYS[2], 0, ARGV[1])
  redis.pcall('ZREM', KEYS[3], ARGV[1])
  redis.pcall('HDEL', KEYS[5], ARGV[1])
end
local freed = false
if KEYS[6] then
  local rec = redis.call('GET', KEYS[6])
  local token = rec and string.match(rec, '^(%d+):1:g$')
  if token and redis.call('GET', KEYS[4]) == token then
    local count = redis.pcall('HGET', KEYS[1], ARGV[1])
    if type(count) == 'string' then
      redis.call('SET', KEYS[6], 'left', 'KEEPTTL')
      removed = removed + 1
      if tonumber(count) > 1 then
        redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
      else
        redis.call('DEL', KEYS[1])
        freed = true
      end
    end
  end
end
if (freed or (mine and head == ARGV[1])) and redis.call('EXISTS', KEYS[1]) == 0 then
  local next = redis.call('LINDEX', KEYS[2], 0)
  if next then
    -- A waiter with an ask listens on the wake id at its end.
    local ask = redis.pcall('HGET', KEYS[5], next)
    local wake = type(ask) == 'string' and string.match(ask, ' (%S+)$') or next
    redis.pcall(publish, ARGV[2] .. wake, '0')
  end
end
if removed > 0 then
  return 1
end
return 0
