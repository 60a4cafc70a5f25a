-- acquire: take a reentrant lock, or re-enter it as its current owner.
--
-- KEYS[1]  the lock hash: owner field -> reentry count, with a PEXPIRE lease
-- KEYS[2]  the lock's fencing-token counter (a string, never given a TTL;
--          see next_token in shared.lua)
-- KEYS[3]  this request's replay record (lives ARGV[3] ms)
-- ARGV[1]  owner field "<client-uuid>:<owner-id>"
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  replay-record lifetime in ms (> 0)
-- ARGV[4]  "1" when this request was never sent before (its record cannot
--          exist, and is not read), anything else on a re-send
-- ARGV[5]  "0" when the caller only tries; "1" when it listens on the
--          lock's channel and waits for the unlock: a refusal then sets the
--          hash's ':wait' field, so the unlock publishes (see
--          shared_acquire.lua for the fields); "2" as "1", and other waits
--          of its client listen too (it wakes one per message), so a fresh
--          take sets ':wait' as well
--
-- Returns
--   {1, token, count}  acquired: fresh (count 1, token = next_token of KEYS[2])
--                      or re-entered (count > 1, token = the current hold's)
--   {0, pttl}          held by another owner; pttl is its remaining lease in ms
--                      (-1 when the key has no TTL)
--   error "WRONGTYPE <type> <i>" when KEYS[i] holds another type, or the
--                      server's own refusal (OOM, READONLY, ...); nothing is
--                      changed
--
-- Side effects: on success the owner's field goes up by one and the lease
-- is set (a re-entry never shortens it); a fresh take also writes the
-- hash's ':token' and ':take', a re-entry records its reply at KEYS[3]. A
-- re-sent request whose record exists, or whose fresh take made the
-- current hold, returns that reply and changes nothing, so a replayed
-- acquire never adds a second reentry. A refusal changes nothing but
-- ':wait' (with ARGV[5]).

if ARGV[4] ~= '1' then
  local replayed = recorded(3) or replayed_take(1, 3)
  if replayed then return replayed end
end

-- Wrong types surface on the first command touching each key, before any
-- write: pcall turns them into a reply naming the key (refused, shared.lua).
-- PTTL answers for a key of any type: -2 means no lock, and otherwise it is
-- the holder's remaining lease, the reply when the lock is another's.
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  return take(1, 2, 3, ARGV[5] == '2')
end
local got = redis.pcall('HMGET', KEYS[1], ARGV[1], ':token', ':wait')
if got.err then return refused(got, 1) end
if not got[1] then
  if ARGV[5] ~= '0' and not got[3] then
    -- A refused mark (a full server) only costs the waiter a wait to the
    -- lease's end.
    redis.pcall('HSET', KEYS[1], ':wait', '1')
  end
  return {0, pttl}
end
return reenter(1, 2, 3, ARGV[3], tonumber(got[2]))
