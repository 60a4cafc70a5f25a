-- shared_wake: waking one sleeping client of a lock; protocol/mod.rs puts
-- it in front of the scripts that free or leave such a lock.
--
-- A reentrant lock's waiters, and a semaphore's, sleep per client: each
-- client listens on a wake channel of its own for the lock (prefix ..
-- client id), and a client with sleeping waits stands in the lock's
-- waiters list (acquire.lua and sem_acquire.lua put it at the end when
-- one of its waits is refused, with listen of shared_listen.lua). An
-- unlock wakes one client, not all of them (a semaphore's release one per
-- permit freed); the client wakes one of its waits.
--
-- wake_next(l, prefix, publish, msg, grant)
--     pops clients from the front of the waiters list KEYS[l] and tells
--     each on its wake channel, until one is still subscribed (PUBLISH
--     counts it) or the list is empty; at most 16 per call. A client that
--     is gone (its connection closed, its channel unsubscribed) counts 0
--     and the next is tried. A refused PUBLISH (an ACL without channel
--     rights) ends the call: waiters then wake at their lease bound.
--     Returns true when a client was told.
--
--     Direct grants: with `grant` (from reentrant_grant below, or a
--     kind's own: a table {a = the KEYS index of the asks hash, give =
--     function(id, ask)}), a client that left an ask is handed what its
--     wait asked for instead of woken: the ask is taken out of the hash and
--     `give` makes the hold, returning the grant's message and a function
--     that undoes it (or nil when it makes none: the client is woken). A
--     grant nobody heard (PUBLISH counted 0: the client is gone) is undone
--     at once and the next client is tried. A refused PUBLISH leaves the
--     grant standing: the waiter finds it at its next attempt.
--
-- reentrant_grant(h, a, c, l)
--     a reentrant lock's grants (KEYS indexes of the free lock hash, the
--     asks hash, the fencing counter and the waiters list). An ask is
--     "<ms> <record key> <attempt> <owner field>" (acquire.lua; an older
--     client's has no attempt); the grant is a fresh hold of that owner
--     exactly as a take by its waiting request would make it (next token,
--     count 1, ':take' = the request's record key, so the request's next
--     attempt finds it as its own), with a first lease of <ms> (the
--     waiter's own lease follows when it learns of the grant), and the
--     message "g <token> <ms> <record key> <attempt>" (the waiter's number
--     for the attempt that left the ask: the grant came after that attempt
--     ran).

local function wake_next(l, prefix, publish, msg, grant)
  for _ = 1, 16 do
    local id = redis.pcall('LPOP', KEYS[l])
    if type(id) ~= 'string' then return false end
    local ask = grant and redis.pcall('HGET', KEYS[grant.a], id)
    local told, undo
    if type(ask) == 'string' then
      redis.call('HDEL', KEYS[grant.a], id)
      told, undo = grant.give(id, ask)
    end
    local heard = redis.pcall(publish, prefix .. id, told or msg)
    -- A refused PUBLISH: a grant stands, a plain wake-up ends the call.
    if type(heard) ~= 'number' then return told ~= nil end
    if heard > 0 then return true end
    if undo then undo() end
  end
  return false
end

local function reentrant_grant(h, a, c, l)
  local function give(_, ask)
    local ms, rec, n, owner = string.match(ask, '^(%d+) (%S+) (%d+) (.+)$')
    if not ms then
      ms, rec, owner = string.match(ask, '^(%d+) (%S+) (.+)$')
    end
    local token = ms and next_token(c)
    if not token then return nil end
    token = string.format('%d', token)
    if redis.call('EXISTS', KEYS[l]) == 1 then
      redis.call('HSET', KEYS[h], owner, '1', ':token', token, ':take', rec, ':kind', 'reentrant', ':wait', '1')
    else
      redis.call('HSET', KEYS[h], owner, '1', ':token', token, ':take', rec, ':kind', 'reentrant')
    end
    redis.call('PEXPIRE', KEYS[h], ms)
    local undo = function() redis.call('DEL', KEYS[h]) end
    return 'g ' .. token .. ' ' .. ms .. ' ' .. rec .. (n and (' ' .. n) or ''), undo
  end
  return {a = a, give = give}
end
