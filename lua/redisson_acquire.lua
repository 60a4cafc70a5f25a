-- redisson_acquire: take or re-enter a reentrant lock in Redisson's layout
-- (the client's `redisson_compatible` setting), so that Redisson's RLock
-- (and its ports, such as node-redisson) and lockwarden exclude each other
-- on one name and hand it over by message.
--
-- KEYS[1]  the lock hash: owner field -> reentry count, as Redisson writes
--          it ('<uuid>:<thread id>'); lockwarden's owner fields have that
--          form already
-- KEYS[2]  the fencing-token counter, Redisson's `redisson_lock_token:{name}`
--          (RFencedLock's: its tokens and lockwarden's come from one counter)
-- KEYS[3]  this request's replay record (lives ARGV[3] ms)
-- ARGV[1]  the caller's owner field
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  replay-record lifetime in ms (> 0)
-- ARGV[4]  "1" when this request was never sent before (its record cannot
--          exist, and is not read), anything else on a re-send
--
-- Returns
--   {1, token, count}  acquired: fresh (count 1, token from next_token on
--                      KEYS[2]) or re-entered (the hold's own ':token';
--                      the counter still moves on, as RFencedLock's does
--                      on a re-entry)
--   {0, pttl}          held by another owner, Redisson's or lockwarden's;
--                      pttl is its remaining lease in ms
--   error "WRONGKIND <kind>" when KEYS[1] is a lockwarden lock of its own
--   layout (a ':kind' field), "WRONGTYPE <type> <i>" when KEYS[i] holds
--   another type, "WRONGTYPE foreign-hash 1" for a hash that is no lock;
--   nothing changed
--
-- Writes only what Redisson's scripts read or ignore: the owner's field,
-- and the hold's ':token' (Redisson's scripts never count fields; an unlock
-- that frees the lock deletes the hash). No waiter marks: every unlock
-- publishes on the channel, as Redisson's does. A re-entry never shortens
-- the lease (PEXPIRE GT).

if ARGV[4] ~= '1' then
  local replayed = recorded(3)
  if replayed then return replayed end
end
local got = redis.pcall('HMGET', KEYS[1], ARGV[1], ':token', ':kind')
if got.err then return refused(got, 1) end
if got[3] then return redis.error_reply('WRONGKIND ' .. got[3]) end
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  local token, refusal = next_token(2)
  if not token then return refusal end
  local text = string.format('%d', token)
  redis.call('HSET', KEYS[1], ARGV[1], '1', ':token', text)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[3], text .. ':1', 'PX', ARGV[3])
  return {1, token, 1}
end
if got[1] then
  -- RFencedLock takes a token on every acquisition, re-entries included:
  -- so does this one (the counter moves as Redisson's would), while the
  -- hold keeps its own token, which its release checks.
  local _, refusal = next_token(2)
  if refusal then return refusal end
  local count = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
  local token = tonumber(got[2] or '0')
  redis.call('SET', KEYS[3], string.format('%d:%d', token, count), 'PX', ARGV[3])
  return {1, token, count}
end
if foreign(1) == 'foreign-hash' then
  return redis.error_reply('WRONGTYPE foreign-hash 1')
end
return {0, pttl}
