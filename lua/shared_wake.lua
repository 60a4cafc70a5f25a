-- shared_wake: waking one sleeping client of a reentrant lock; protocol/mod.rs puts
-- it in front of the scripts that free or leave such a lock.
--
-- A reentrant lock's waiters sleep per client: each client listens on a
-- wake channel of its own for the lock (prefix .. client id), and a client
-- with sleeping waits stands in the lock's waiters list (acquire.lua puts
-- it at the end when one of its waits is refused). An unlock wakes one
-- client, not all of them; the client wakes one of its waits.
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
--     Direct grants: with `grant` = {h, a, c} (the KEYS indexes of the free
--     lock hash, the asks hash and the fencing counter), a client that left
--     an ask ("<ms> <record key> <attempt> <owner field>", acquire.lua; an
--     older client's has no attempt) is handed the lock instead of woken: a
--     fresh hold of that owner exactly as a take by its waiting request
--     would make it (next token, count 1, ':take' = the request's record
--     key, so the request's next attempt finds it as its own), with a first
--     lease of <ms> (the waiter's own lease follows when it learns of the
--     grant), and the message "g <token> <ms> <record key> <attempt>" (the
--     waiter's number for the attempt that left the ask: the grant came
--     after that attempt ran). A grant nobody heard (PUBLISH counted 0: the
--     client is gone) is undone at once and the next client is tried. A
--     refused PUBLISH leaves the grant standing: the waiter finds it at its
--     next attempt.

local function wake_next(l, prefix, publish, msg, grant)
  for _ = 1, 16 do
    local id = redis.pcall('LPOP', KEYS[l])
    if type(id) ~= 'string' then return false end
    local ask = grant and redis.pcall('HGET', KEYS[grant[2]], id)
    local ms, rec, n, owner
    if type(ask) == 'string' then
      redis.call('HDEL', KEYS[grant[2]], id)
      ms, rec, n, owner = string.match(ask, '^(%d+) (%S+) (%d+) (.+)$')
      if not ms then
        ms, rec, owner = string.match(ask, '^(%d+) (%S+) (.+)$')
      end
    end
    local token = ms and next_token(grant[3])
    if token then
      local h = KEYS[grant[1]]
      token = string.format('%d', token)
      if redis.call('EXISTS', KEYS[l]) == 1 then
        redis.call('HSET', h, owner, '1', ':token', token, ':take', rec, ':kind', 'reentrant', ':wait', '1')
      else
        redis.call('HSET', h, owner, '1', ':token', token, ':take', rec, ':kind', 'reentrant')
      end
      redis.call('PEXPIRE', h, ms)
      local msg = 'g ' .. token .. ' ' .. ms .. ' ' .. rec .. (n and (' ' .. n) or '')
      local heard = redis.pcall(publish, prefix .. id, msg)
      if type(heard) ~= 'number' or heard > 0 then return true end
      redis.call('DEL', h)
    else
      local n = redis.pcall(publish, prefix .. id, msg)
      if type(n) ~= 'number' then return false end
      if n > 0 then return true end
    end
  end
  return false
end
