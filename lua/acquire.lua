-- acquire: take a reentrant lock, or re-enter it as its current owner.
-- Its common case, a first send taking a free lock, is answered ahead of
-- this file by acquire_free.lua, which also reads the lock's PTTL for
-- this file (`pttl`).
--
-- KEYS[1]  the lock hash: owner field -> reentry count, with a PEXPIRE lease
-- KEYS[2]  the lock's fencing-token counter (a string, never given a TTL;
--          see next_token in shared.lua)
-- KEYS[3]  this request's replay record (lives ARGV[3] ms)
-- KEYS[4]  the lock's waiters list: ids of clients whose waits sleep until
--          an unlock wakes them (see shared_wake.lua)
-- ARGV[1]  owner field "<client-uuid>:<owner-id>"
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  replay-record lifetime in ms (> 0)
-- ARGV[4]  "1" when this request was never sent before (its record cannot
--          exist, and is not read), anything else on a re-send
-- ARGV[5]  "0" when the caller only tries; "1" when it listens on its
--          client's wake channel and waits for the unlock: a refusal then
--          puts the client in KEYS[4] (once) and sets the hash's ':wait'
--          field, so the unlock wakes a client (see shared_acquire.lua for
--          the fields), and a fresh take sets ':wait' when other clients
--          are in KEYS[4]; "2" as "1", and other waits of its client listen
--          too (it wakes one per message), so a fresh take also puts the
--          client back in KEYS[4] and sets ':wait'; "3" and "4" as "1" and
--          "2", for a waiter an unlock woke: refused, its client goes back
--          to the front of KEYS[4] (it lost a race to an owner that did not
--          wait), so it is woken next
-- ARGV[6]  the caller's client id, the end of its wake channel's name
--          (read when ARGV[5] is not "0")
-- ARGV[7]  with KEYS[5], for a listening caller: the first lease in ms of
--          a direct grant to this wait (see below); left out when it does
--          not ask for one
-- ARGV[8]  with ARGV[7]: the waiter's number for this attempt, kept in the
--          ask and named back by a grant's message (shared_wake.lua); left
--          out, the ask has none (as an older client's)
-- KEYS[5]  the waiters' grant asks (hash: client id -> "<ms> <record key>
--          <attempt> <owner field>"); given with ARGV[7], or to take the
--          client's ask back
--
-- Direct grants (one master, see wait.rs): a refused caller whose client
-- has no other wait on the lock (ARGV[5] "1" or "3") and that gives
-- ARGV[7] leaves an ask, so the unlock that wakes its client hands it the
-- lock instead (wake_next, shared_wake.lua): the hold its own take would
-- have made, ':take' naming KEYS[3]. The wait then keeps its request id
-- for its next attempts (sent as re-sends, ARGV[4] not "1"), so an attempt
-- after a grant whose message was lost finds the hold as its own
-- (replayed_take) and sets its lease to ARGV[2] (never shortening). A
-- refusal with other waits of the client ("2", "4") takes the client's
-- ask back (the message could reach another wait), and so does a take.
--
-- A caller that only tries (ARGV[5] "0") may leave out ARGV[5], ARGV[6]
-- and KEYS[4]: nothing reads them then, and fewer arguments cost the
-- server (and the client) less. `waiting`, set by acquire_free.lua ahead
-- of this file, is ARGV[5] with "0" for left out.
--
-- Returns
--   token              acquired fresh, by a first send that found the lock
--                      free (acquire_free.lua): count 1, token =
--                      next_token of KEYS[2]. A bare number, not a table:
--                      making and answering a table costs the server about
--                      as much as the hash's writes
--   {1, token, count}  acquired otherwise: fresh (count 1), or re-entered
--                      (count > 1, token = the current hold's)
--   {0, pttl}          held by another owner; pttl is its remaining lease in ms
--                      (-1 when the key has no TTL)
--   {0, pttl, place}   the same, for a listening caller (ARGV[5] not "0"):
--                      its client's place in KEYS[4], from 0 at the front
--                      (the client woken next)
--   error "WRONGTYPE <type> <i>" when KEYS[i] holds another type, or the
--                      server's own refusal (OOM, READONLY, ...); nothing is
--                      changed
--   error "WRONGKIND <kind>" / "WRONGTYPE foreign-hash 1" when KEYS[1] is
--                      another kind's lock or a hash lockwarden did not
--                      write (wrong_kind, shared.lua); nothing is changed
--
-- Side effects: on success the owner's field goes up by one and the lease
-- is set (a re-entry never shortens it); a fresh take also writes the
-- hash's ':token' and ':take', a re-entry records its reply at KEYS[3]. A
-- re-sent request whose record exists, or whose fresh take made the
-- current hold, returns that reply and changes nothing, so a replayed
-- acquire never adds a second reentry. A refusal changes nothing but
-- ':wait' and KEYS[4] (with ARGV[5]). KEYS[4] lives at least as long as
-- the lease its newest member was refused under, plus a second: each of
-- its clients has a wait that wakes by then anyway.

if ARGV[4] ~= '1' then
  local replayed = recorded(3)
  if replayed then return replayed end
  replayed = replayed_take(1, 3)
  if replayed then
    if ARGV[7] then
      -- A direct grant to this wait (or its own take, re-sent): its lease.
      redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
    end
    return replayed
  end
end

-- Wrong types surface on the first command touching each key, before any
-- write: pcall turns them into a reply naming the key (refused, shared.lua).
-- `pttl` is the lock's PTTL, read by acquire_free.lua ahead of this file.
if pttl == -2 then
  local waited = false
  if waiting == '2' or waiting == '4' then
    listen(4, ARGV[6], tonumber(ARGV[2]), false)
    waited = true
  elseif waiting ~= '0' then
    -- Woken while other clients sleep: this hold's unlock wakes the next.
    waited = redis.call('EXISTS', KEYS[4]) == 1
  end
  local taken = take(1, 2, 3, waited, 'reentrant')
  -- Only after the take's first write: a script's first write decides
  -- whether a full server (OOM) refuses it, and this one must not let
  -- the take's writes through.
  if KEYS[5] and taken[1] == 1 then
    redis.call('HDEL', KEYS[5], ARGV[6])
  end
  return taken
end
local got = redis.pcall('HMGET', KEYS[1], ARGV[1], ':token', ':wait', ':kind')
if got.err then return refused(got, 1) end
local other = wrong_kind(got[4], 'reentrant')
if other then return other end
if not got[1] then
  if waiting ~= '0' then
    local ttl = pttl >= 0 and pttl or tonumber(ARGV[2])
    local place = listen(4, ARGV[6], ttl, waiting == '3' or waiting == '4')
    -- The ask only matters to a listed client; a refused write (a full
    -- server) leaves the waiter to be woken rather than handed the lock.
    if KEYS[5] and place then
      if ARGV[7] and (waiting == '1' or waiting == '3') then
        local attempt = ARGV[8] and (ARGV[8] .. ' ') or ''
        local n = redis.pcall('HSET', KEYS[5], ARGV[6], ARGV[7] .. ' ' .. KEYS[3] .. ' ' .. attempt .. ARGV[1])
        if type(n) == 'number' then
          redis.call('PEXPIRE', KEYS[5], string.format('%d', ttl + 1000))
        end
      else
        redis.pcall('HDEL', KEYS[5], ARGV[6])
      end
    end
    if not got[3] then
      -- A refused mark (a full server) only costs the waiter a wait to the
      -- lease's end.
      redis.pcall('HSET', KEYS[1], ':wait', '1')
    end
    if place then return {0, pttl, place} end
  end
  return {0, pttl}
end
return reenter(1, 2, 3, ARGV[3], tonumber(got[2]))
