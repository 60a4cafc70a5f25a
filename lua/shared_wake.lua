-- shared_wake: waking one sleeping client of a reentrant lock; protocol/mod.rs puts
-- it in front of the scripts that free or leave such a lock.
--
-- A reentrant lock's waiters sleep per client: each client listens on a
-- wake channel of its own for the lock (prefix .. client id), and a client
-- with sleeping waits stands in the lock's waiters list (acquire.lua puts
-- it at the end when one of its waits is refused). An unlock wakes one
-- client, not all of them; the client wakes one of its waits.
--
-- wake_next(l, prefix, publish, msg)
--     pops clients from the front of the waiters list KEYS[l] and tells
--     each on its wake channel, until one is still subscribed (PUBLISH
--     counts it) or the list is empty; at most 16 per call. A client that
--     is gone (its connection closed, its channel unsubscribed) counts 0
--     and the next is tried. A refused PUBLISH (an ACL without channel
--     rights) ends the call: waiters then wake at their lease bound.
--     Returns true when a client was told.

local function wake_next(l, prefix, publish, msg)
  for _ = 1, 16 do
    local id = redis.pcall('LPOP', KEYS[l])
    if type(id) ~= 'string' then return false end
    local n = redis.pcall(publish, prefix .. id, msg)
    if type(n) ~= 'number' then return false end
    if n > 0 then return true end
  end
  return false
end
