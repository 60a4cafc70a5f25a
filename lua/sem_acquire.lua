-- sem_acquire: take permits of a semaphore with expiring permits.
--
-- KEYS[1]  the semaphore hash: permit id -> permits it holds, and for each
--          ':' .. permit id -> its lease deadline (server ms); ':wait' when
--          a listening waiter was refused (see shared_rw.lua: the same
--          snapshot, where every holder is a "reader" with its own lease)
-- KEYS[2]  the number of permits stored with the semaphore (a string; when
--          it is there, it is the number, whatever ARGV[3] says)
-- ARGV[1]  the permit id "<client-uuid>:p<n>:r" (unique per acquisition,
--          so the acquisition is its own replay record)
-- ARGV[2]  permits to take (>= 1)
-- ARGV[3]  the semaphore's number of permits, as the caller's handle has
--          it (used while none is stored at KEYS[2])
-- ARGV[4]  lease in ms (> 0)
-- ARGV[5]  "0" when the caller only tries, anything else when it waits
--          (listening on the channel) if refused; "2" also says other
--          waits of its client listen, so a grant sets ':wait'
-- ARGV[6]  the attempt's request id (the grant's request at
--          ':q:<permit id>' tells a re-send from another attempt)
--
-- Returns
--   {1, 0, 1}      granted (or granted already: a re-send of the request
--                  that got the grant finds it; another attempt of the
--                  same acquisition is refused while that grant stands)
--   {0, ms}        not enough permits free: ms until the first holder's
--                  lease ends (when permits may come back without a release)
--   error "WRONGTYPE <type> <i>" (KEYS[i]), or the server's own refusal
--   error "WRONGKIND <kind>" / "WRONGTYPE foreign-hash 1" when KEYS[1] is
--                  another kind's lock or a hash lockwarden did not write
--                  (wrong_kind, shared.lua); nothing changed
--
-- Side effects: holders whose lease passed are removed first (their
-- permits are free again). A grant writes the id with its permits and
-- deadline and keeps the hash's TTL at least its lease. Permits in use
-- never exceed the number (KEYS[2], else ARGV[3]) by a grant: a holder of more (the number was
-- lowered) keeps them, and nothing more is granted until the use fits.

local now = now_ms()
local me, take, total, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local stored = redis.pcall('GET', KEYS[2])
if type(stored) == 'table' and stored.err then return refused(stored, 2) end
if stored then
  total = tonumber(stored)
  -- A string that is not a number is no number of ours: left alone.
  if not total then return redis.error_reply('WRONGTYPE string 2') end
end
local s, refusal = snapshot(now, 'semaphore')
if not s then return refusal end
if s.f[me] then
  if s.f[':q:' .. me] == ARGV[6] then
    -- A re-send of the request that got the grant.
    return {1, 0, 1}
  end
  -- The grant of another attempt of the same acquisition, whose reply was
  -- lost: that request's re-send in the background finds it and gives it
  -- back. Until then it is a holder like any other (taking it over here
  -- would let that give-back free a grant this attempt's caller counts
  -- on); its release wakes this waiter.
  if ARGV[5] ~= '0' and not s.f[':wait'] then
    redis.pcall('HSET', KEYS[1], ':wait', '1')
  end
  return {0, s.soonest or 1}
end
local used = 0
for k, v in pairs(s.f) do
  if string.sub(k, 1, 1) ~= ':' and is_reader(k) then used = used + tonumber(v) end
end
if used + take > total then
  -- The mark goes on a hash that is there. With none (the number was
  -- lowered below this take), an HSET would make a hash of ':wait' alone,
  -- without kind or TTL, that every later call refuses as no lockwarden
  -- hash; nobody holds permits then, so no release is to wake this
  -- waiter: raising the number does (sem_permits.lua).
  if ARGV[5] ~= '0' and not s.f[':wait'] and next(s.f) then
    redis.pcall('HSET', KEYS[1], ':wait', '1')
  end
  return {0, s.soonest or 1}
end
redis.call('HSET', KEYS[1], me, take, ':' .. me, string.format('%d', now + lease), ':q:' .. me, ARGV[6], ':kind', 'semaphore')
if ARGV[5] == '2' and not s.f[':wait'] then
  -- Other waits of the caller's client may still sleep: this holder's
  -- release must wake them.
  redis.call('HSET', KEYS[1], ':wait', '1')
end
cover(s, lease)
return {1, 0, 1}
