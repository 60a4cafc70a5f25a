-- release: leave one level of a reentrant hold. Its common case, a first
-- send leaving an unwaited hold's last level, is answered ahead of this
-- file by release_last.lua, which also hands a first send's read of the
-- hash on to leave_level (`held`).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's waiters list (clients whose waits sleep, see
--          shared_wake.lua)
-- KEYS[3]  this request's replay record (lives ARGV[3] ms)
-- KEYS[4]  the lock's fencing-token counter
-- KEYS[5]  the waiters' grant asks (hash: client id -> "<ms> <record key>
--          <attempt> <owner field>", see acquire.lua); left out, no direct
--          grants
-- ARGV[1]  owner field "<client-uuid>:<owner-id>"
-- ARGV[2]  lease in ms to re-apply while still held, 0 to leave the TTL alone
--          (never shortens the current lease)
-- ARGV[3]  replay-record lifetime in ms (> 0)
-- ARGV[4]  the fencing token of the hold being released, or "" when unknown
-- ARGV[5]  "1" when this request was never sent before (its record cannot
--          exist, and is not read), anything else on a re-send
-- ARGV[6]  prefix of the clients' wake channels (prefix .. client id)
-- ARGV[7]  message to publish on the wake channel of the client woken;
--          "0" when left out
-- ARGV[8]  "SPUBLISH" on a cluster (sharded pub/sub: the channel shares the
--          lock's slot); PUBLISH when left out or anything else
--
-- The last two are left out unless they differ from what leaving them out
-- means: each argument costs the server (and the client) a little.
--
-- Returns
--   0    released: the owner's last level was removed, and one sleeping
--        client was woken if the hold was marked as waited for
--   n>0  still held by the owner with n levels left
--   -1   not held by this hold (expired, lost, never taken, or a newer hold of
--        the same owner, told apart by its token): nothing changed
--   error "WRONGTYPE <type> 1" when KEYS[1] is not a hash, or the server's own
--        refusal (OOM, READONLY, ...); nothing changed
--
-- Side effects: HINCRBY -1 of the owner's field; at zero the hash (whose only
-- owner is this one) is deleted and, when its ':wait' field says a waiter
-- listens (shared_acquire.lua), the first client of KEYS[2] that still
-- listens is popped and told (wake_next, shared_wake.lua): handed the lock
-- when it left an ask in KEYS[5], else woken. Nobody listens
-- otherwise: a waiter's attempts after it subscribed set ':wait' when
-- refused, and an unlock before such an attempt leaves the lock free for
-- it. A refused
-- PUBLISH (an ACL without channel rights) does not turn the release into an
-- error: the lock is free, and waiters wake at their lease bound.
--
-- Replays: while levels remain, KEYS[3] records the reply, so a replay never
-- subtracts twice. A release that freed the lock needs no record when the
-- token is given: any later hold has a higher token, so a replay finds no
-- matching hold and changes nothing.

local publish = ARGV[8] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

local done, listened = leave_level(1, 4, 3, 4, ARGV[5] == '1', held, 'reentrant')
if done then
  return done
end
if listened then
  wake_next(2, ARGV[6], publish, ARGV[7] or '0', KEYS[5] and reentrant_grant(1, 5, 4, 2))
end
return 0
