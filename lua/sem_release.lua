-- sem_release: give back the permits of one acquisition.
--
-- KEYS[1]  the semaphore hash (see sem_acquire.lua)
-- KEYS[2]  the semaphore's channel (where waiters of older clients listen)
-- KEYS[3]  the semaphore's waiters list (see sem_acquire.lua)
-- KEYS[4]  the waiters' grant asks; left out, no direct grants
-- KEYS[5]  the number of permits stored with the semaphore
-- ARGV[1]  the permit id
-- ARGV[2]  "SPUBLISH" on a cluster, anything else for PUBLISH
-- ARGV[3]  the message to publish
-- ARGV[4]  the semaphore's number of permits, as the caller's handle has
--          it (used while none is stored at KEYS[5])
-- ARGV[5]  prefix of the clients' wake channels (prefix .. client id)
-- ARGV[6]  prefix of the request records' keys (a grant's message names
--          the record key of the request it answers)
--
-- ARGV[7]  optional: the request whose hold this must be (its ':q:'); a
--          hold of the permit id that another request made is left alone
--          (-1). The holder's own release names the request that took its
--          permits; so does the give-back of an attempt whose outcome was
--          unknown, which must not free what a later attempt of the same
--          acquisition took once the first hold had lapsed.
--
-- KEYS[3] to KEYS[5] and ARGV[4] to ARGV[6] may be left out together:
-- nobody listed is woken then.
--
-- Returns 0 released, -1 not held (its lease ended, or released already: a
-- re-send finds nothing, and changes nothing; or held under another
-- request than ARGV[7]); error "WRONGTYPE <type> 1",
-- or the server's own refusal.
--
-- Side effects: HDEL of the id, its deadline and its request; the hash goes
-- with its last holder. The permits free then go to the listed clients
-- (hand_out, shared_permits.lua): handed to those that asked, as far as
-- they fit, else one client woken per permit. The channel is told when
-- ':wait' says a waiter of an older client listens there. A refused
-- PUBLISH does not turn the release into an error: waiters then wake at
-- their lease bound.

local now = now_ms()
local s, refusal, other = snapshot(now, 'semaphore')
if not s then
  if other then return -1 end
  return refusal
end
if not s.f[ARGV[1]] then return -1 end
if ARGV[7] and ARGV[7] ~= '' and s.f[':q:' .. ARGV[1]] ~= ARGV[7] then return -1 end
give_back(s, ARGV[1])
local publish = ARGV[2] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'
wake_waiters(s, publish, ARGV[3])
if KEYS[3] then
  local total = permits_in_force(ARGV[4])
  if total then hand_out(s, now, publish, ARGV[3], total, ARGV[5], ARGV[6]) end
end
return 0
