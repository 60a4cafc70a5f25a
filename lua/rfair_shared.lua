-- rfair_shared: what the scripts of the fair lock in Redisson's layout share
-- (the client's `redisson_compatible` setting); protocol/redisson.rs puts it
-- after shared.lua in front of them.
--
-- The layout is Redisson's RFairLock: the lock hash at the name (RLock's:
-- owner field -> reentry count, PEXPIRE = lease), the waiters' list
-- `redisson_lock_queue:{name}` (owner fields, head first) and the sorted set
-- `redisson_lock_timeout:{name}` (owner field -> the time, in ms, after which
-- a waiter that has not taken the lock is dropped from the queue). A
-- waiter's time is the one of the waiter before it (or now plus the lock's
-- remaining lease) plus the thread wait time (Redisson's default: 5
-- minutes); taking the lock moves every waiter's time back by the thread
-- wait time. Redisson counts these times on its client's clock, lockwarden
-- on the server's. Each waiter is woken on a channel of its own: the
-- channel prefix followed by its owner field.
--
-- now_ms()               the server's clock in ms
-- drop_stale(q, t, now)  drops the waiters at the head of the list KEYS[q]
--                        whose time in KEYS[t] has passed (or who have none)
-- wake_head(q, prefix, how)
--                        publishes "0" on the channel of the head of KEYS[q]
--                        (SPUBLISH when how says so), if there is one

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function drop_stale(q, t, now)
  while true do
    local head = redis.call('LINDEX', KEYS[q], 0)
    if not head then return end
    local at = tonumber(redis.call('ZSCORE', KEYS[t], head))
    if at and at > now then return end
    redis.call('ZREM', KEYS[t], head)
    redis.call('LPOP', KEYS[q])
  end
end

local function wake_head(q, prefix, how)
  local head = redis.call('LINDEX', KEYS[q], 0)
  if head then
    redis.pcall(how == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH', prefix .. head, '0')
  end
end
