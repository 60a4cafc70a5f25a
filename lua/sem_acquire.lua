-- sem_acquire: take permits of a semaphore with expiring permits.
--
-- KEYS[1]  the semaphore hash: permit id -> permits it holds, and for each
--          ':' .. permit id -> its lease deadline (server ms) and ':q:' ..
--          permit id -> the request of its grant (see shared_rw.lua: the
--          same snapshot, where every holder is a "reader" with its own
--          lease); ':wait' is an older client's waiter, refused while it
--          listened on KEYS[2] of sem_release.lua (never written here)
-- KEYS[2]  the number of permits stored with the semaphore (a string; when
--          it is there, it is the number, whatever ARGV[3] says)
-- ARGV[1]  the permit id "<client-uuid>:p<n>:r" (unique per acquisition,
--          so the acquisition is its own replay record)
-- ARGV[2]  permits to take (>= 1)
-- ARGV[3]  the semaphore's number of permits, as the caller's handle has
--          it (used while none is stored at KEYS[2])
-- ARGV[4]  lease in ms (> 0)
-- ARGV[5]  "0" when the caller only tries; "1" when it waits if
--          refused, listening on its client's wake channel: a refusal puts
--          the client in KEYS[3] (once), so a release wakes it (see
--          shared_wake.lua); "2" as "1", and other waits of its client
--          listen too (it wakes one per message), so a grant also puts the
--          client back in KEYS[3]; "3" and "4" as "1" and "2", for a
--          waiter a release woke: refused, its client goes back to the
--          front of KEYS[3], so it is woken next
-- ARGV[6]  the attempt's request id (the grant's request at
--          ':q:<permit id>' tells a re-send from another attempt); a wait
--          that asks for direct grants keeps one for all its attempts
-- ARGV[7]  the caller's client id, the end of its wake channel's name
--          (with ARGV[5] not "0")
-- ARGV[8]  with KEYS[4]: the first lease in ms of a direct grant to this
--          wait; left out when it does not ask for one
-- ARGV[9]  with ARGV[8]: the waiter's number for this attempt, kept in
--          the ask and named back by a grant's message
-- ARGV[10] with ARGV[7]: the claim's length in ms (the client's waiter
--          timeout; see the claim below); left out, the wait makes no
--          claim. A wait that leaves no ask gives ARGV[8] and ARGV[9] as
--          empty strings before it.
-- KEYS[3]  the semaphore's waiters list: ids of clients whose waits sleep
--          until a release wakes them (with ARGV[5] not "0")
-- KEYS[4]  the waiters' grant asks (hash: client id -> "<ms> <request id>
--          <attempt> <permits> <permit id>"); given with ARGV[8], or to
--          take the client's ask back
--
-- Direct grants (one master, see wait.rs): a refused caller whose client
-- has no other wait on the semaphore (ARGV[5] "1" or "3") and that gives
-- ARGV[8] leaves an ask, so the release that frees enough permits hands
-- them to it (sem_release.lua): the permit id written as this attempt's
-- grant would write it, with ':q:' naming ARGV[6]. The wait's next
-- attempt, under the same request id, finds the grant as its own and sets
-- its lease to ARGV[4] (never shortening). A refusal with other waits of
-- the client ("2", "4") takes the client's ask back (the message could
-- reach another wait), and so does a grant.
--
-- The claim (':claim' in KEYS[1], "<client id> <permits> <deadline>"): a
-- refused caller that is its client's only wait ("1" or "3") and whose
-- client is at the front of KEYS[3] claims the permits it asks for,
-- while holders are there to free them and no other client's claim
-- stands. While the claim stands
-- (to its deadline, ARGV[10] after the claimant's latest refusal: its
-- attempts renew it), another client's acquisition is granted only if the
-- claim still fits beside it, and a release hands permits to others only
-- so far (hand_out, shared_permits.lua): permits freed one at a time
-- gather for the claimant instead of going to whoever asks first, so an
-- acquisition of several permits is not kept out by acquisitions of one.
-- A grant to the claimant's client ends the claim, and so does its leave
-- (sem_leave.lua); a claimant that died holds the others back to the
-- claim's deadline at most.
--
-- Returns
--   {1, 0, 1}      granted (or granted already: a re-send of the request
--                  that got the grant finds it; another attempt of the
--                  same acquisition is refused while that grant stands)
--   {0, ms}        not enough permits free: ms until the first holder's
--                  lease ends (when permits may come back without a release)
--   {0, ms, place} the same, for a listening caller: its client's place in
--                  KEYS[3], from 0 at the front (the client woken next)
--   error "WRONGTYPE <type> <i>" (KEYS[i]), or the server's own refusal
--   error "WRONGKIND <kind>" / "WRONGTYPE foreign-hash 1" when KEYS[1] is
--                  another kind's lock or a hash lockwarden did not write
--                  (wrong_kind, shared.lua); nothing changed
--
-- Side effects: holders whose lease passed are removed first (their
-- permits are free again). A grant writes the id with its permits and
-- deadline and keeps the hash's TTL at least its lease. A refusal changes
-- nothing but KEYS[3] and KEYS[4] (with ARGV[5]); KEYS[3] and KEYS[4] live
-- at least as long as the time the refusal gives, plus a second: each of
-- the listed clients has a wait that looks again by then anyway. Permits in use
-- never exceed the number (KEYS[2], else ARGV[3]) by a grant: a holder of more (the number was
-- lowered) keeps them, and nothing more is granted until the use fits.

local now = now_ms()
local me, take, total, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local waiting = ARGV[5]
local stored = redis.pcall('GET', KEYS[2])
if type(stored) == 'table' and stored.err then return refused(stored, 2) end
if stored then
  total = tonumber(stored)
  -- A string that is not a number is no number of ours: left alone.
  if not total then return redis.error_reply('WRONGTYPE string 2') end
end
local s, refusal = snapshot(now, 'semaphore')
if not s then return refusal end
-- The caller leaves an ask (direct grants).
local asks = KEYS[4] and ARGV[8] and ARGV[8] ~= ''

-- The refusal: ms until permits may come back. A listening caller's
-- client is listed (listen, shared_listen.lua), at the front when a
-- release woke it, and leaves its ask or takes it back; a list or asks
-- key of another type leaves the waiter to look again by `ms`.
local function refuse(ms)
  if waiting == '0' or not KEYS[3] then return {0, ms} end
  local place = listen(3, ARGV[7], ms, waiting == '3' or waiting == '4')
  local alone = waiting == '1' or waiting == '3'
  local claimant = claim_of(s, now)
  if alone and place == 0 and ARGV[10] and s.readers > 0 and (not claimant or claimant == ARGV[7]) then
    redis.call('HSET', KEYS[1], ':claim', table.concat({ARGV[7], ARGV[2], string.format('%d', now + tonumber(ARGV[10]))}, ' '))
  end
  if KEYS[4] and place then
    if asks and alone then
      local ask = table.concat({ARGV[8], ARGV[6], ARGV[9] or '0', ARGV[2], me}, ' ')
      local n = redis.pcall('HSET', KEYS[4], ARGV[7], ask)
      -- Never shortened: other clients' asks live in the same hash.
      if type(n) == 'number' and redis.call('PTTL', KEYS[4]) < ms + 1000 then
        redis.call('PEXPIRE', KEYS[4], string.format('%d', ms + 1000))
      end
    else
      redis.pcall('HDEL', KEYS[4], ARGV[7])
    end
  end
  if place then return {0, ms, place} end
  return {0, ms}
end

if s.f[me] then
  if s.f[':q:' .. me] == ARGV[6] then
    -- A re-send of the request that got the grant, or a direct grant to
    -- this wait (found by its next attempt): its lease.
    if asks then
      local deadline = math.max(tonumber(s.f[':' .. me]), now + lease)
      redis.call('HSET', KEYS[1], ':' .. me, string.format('%d', deadline))
      redis.call('PEXPIRE', KEYS[1], lease, 'GT')
      redis.pcall('HDEL', KEYS[4], ARGV[7])
    end
    return {1, 0, 1}
  end
  -- The grant of another attempt of the same acquisition, whose reply was
  -- lost: that request's re-send in the background finds it and gives it
  -- back. Until then it is a holder like any other (taking it over here
  -- would let that give-back free a grant this attempt's caller counts
  -- on); its release wakes this waiter.
  return refuse(s.soonest or 1)
end
local used = 0
for k, v in pairs(s.f) do
  if string.sub(k, 1, 1) ~= ':' and is_reader(k) then used = used + tonumber(v) end
end
if used + take > total then
  -- With no holder at all (the number was lowered below this take), no
  -- release is to wake this waiter: raising the number does
  -- (sem_permits.lua).
  return refuse(s.soonest or 1)
end
local who, need, till = claim_of(s, now)
if who and who ~= ARGV[7] and used > 0 and used + take + need > total then
  -- Another client's claim does not fit beside this take: refused until
  -- the claim is served or lapses. (With no holder left, no release is to
  -- serve the claim: the claimant's own attempt takes the permits, or a
  -- grant to another fits.)
  return refuse(math.min(s.soonest or 1, till - now))
end
redis.call('HSET', KEYS[1], me, take, ':' .. me, string.format('%d', now + lease), ':q:' .. me, ARGV[6], ':kind', 'semaphore')
if who and who == ARGV[7] then redis.call('HDEL', KEYS[1], ':claim') end
cover(s, lease)
-- Only after the grant's first write (see acquire.lua).
if waiting == '2' or waiting == '4' then
  -- Other waits of the caller's client may still sleep: a release must
  -- wake them.
  listen(3, ARGV[7], lease, false)
end
if KEYS[4] then
  redis.pcall('HDEL', KEYS[4], ARGV[7])
end
return {1, 0, 1}
