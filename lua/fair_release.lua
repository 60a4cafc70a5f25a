-- fair_release: leave one level of a fair lock's hold; the last level wakes
-- the head of the queue, and only it.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the waiter queue
-- KEYS[3]  the waiter deadlines
-- KEYS[4]  the lock's fencing-token counter
-- KEYS[5]  this request's replay record (lives ARGV[3] ms)
-- KEYS[6]  the waiters' grant asks (hash: owner field -> "<deadline ms>
--          <lease ms> <record ms> <request id> <attempt> <wake id>",
--          written by fair_acquire.lua; the deadline is the waiter's score
--          in KEYS[3]; an ask without the attempt, from an older client,
--          is granted as well)
-- ARGV[1]  owner field
-- ARGV[2]  lease in ms to re-apply while still held, 0 to leave the TTL alone
-- ARGV[3]  replay-record lifetime in ms (> 0)
-- ARGV[4]  the fencing token of the hold being released, or "" when unknown
-- ARGV[5]  prefix of the waiters' wake channels
-- ARGV[6]  "SPUBLISH" on a cluster (sharded pub/sub: the channels share the
--          lock's slot), anything else for PUBLISH
-- ARGV[7]  prefix of the request records (the head's record key is ARGV[7]
--          followed by the request id of its ask; same hash tag, so the
--          same cluster slot as KEYS)
-- ARGV[8]  "1" when this request was never sent before (its record cannot
--          exist, and is not read), anything else on a re-send
--
-- Returns 0 released (and the live head, if any, woken or granted), n > 0
-- levels left, -1 not held by this hold (nothing changed); error
-- "WRONGTYPE <type> 1", or the server's own refusal (OOM, READONLY, ...).
-- A refused PUBLISH (an ACL without channel rights) does not turn the
-- release into an error: the head learns of its grant, or of the free
-- lock, at its next refresh.
--
-- Side effects: as release.lua; on the last level, waiters at the head
-- whose deadline passed (server TIME) are evicted before the head is
-- chosen, so a dead waiter is never the only one told. Replays: as
-- release.lua.
--
-- Direct grant: when the live head left an ask, the lock goes to it here,
-- as fair_acquire.lua would give it (new token, count 1, out of the
-- queue), with a lease of min(its asked lease, its deadline - now): a
-- grantee that died since its last refresh blocks the queue no longer than
-- its eviction would have. Its request record says "<token>:1:g", so its
-- next attempt (if the message is lost) returns the grant and sets its full
-- lease. The message "g <token> <lease ms> <request id> <attempt>", on
-- ARGV[5] .. wake id, tells the waiter it holds the lock; the attempt
-- (the waiter's number for the attempt that left the ask) tells it the
-- grant came after that attempt ran. A head without an ask gets
-- "0" on ARGV[5] .. its owner field and takes the lock with
-- fair_acquire.lua.

local publish = ARGV[6] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

local done = leave_level(1, 4, 5, 4, ARGV[8] == '1', nil, 'fair')
if done then
  return done
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Take the head off the queue, evicting it while its waiter's deadline
-- passed: the head is who gets the lock, so a dead waiter is never the one
-- told. Stale waiters further back are evicted once they reach the head,
-- or by the next acquire attempt, whichever comes first. A waiter's ask
-- starts with its deadline (the score it has in KEYS[3]); a waiter without
-- an ask (a quorum's) has only the score.
local head, deadline, lease, keep, id, n, wake
while true do
  head = redis.pcall('LPOP', KEYS[2])
  if type(head) ~= 'string' then
    return 0
  end
  local ask = redis.pcall('HGET', KEYS[6], head)
  lease, id, n, wake = nil, nil, nil, nil
  if type(ask) == 'string' then
    deadline, lease, keep, id, n, wake =
      string.match(ask, '^(%d+) (%d+) (%d+) (%S+) (%d+) (%S+)$')
    if not lease then
      deadline, lease, keep, id, wake =
        string.match(ask, '^(%d+) (%d+) (%d+) (%S+) (%S+)$')
    end
  end
  if not lease then
    deadline = redis.pcall('ZSCORE', KEYS[3], head)
    if type(deadline) ~= 'string' then
      deadline = nil
    end
  end
  if not deadline or tonumber(deadline) > now then
    break
  end
  redis.call('ZREM', KEYS[3], head)
  redis.pcall('HDEL', KEYS[6], head)
end
if lease then
  local token = next_token(4)
  if token then
    -- Numbers become strings once, as integers (Lua's own conversion goes
    -- through floating-point formatting, at every use).
    token = string.format('%d', token)
    local ms = math.min(tonumber(lease), tonumber(deadline) - now)
    local ms_text = string.format('%d', ms)
    redis.call('ZREM', KEYS[3], head)
    redis.call('HDEL', KEYS[6], head)
    redis.call('HSET', KEYS[1], head, '1', ':token', token, ':kind', 'fair')
    redis.call('PEXPIRE', KEYS[1], ms_text)
    local record_ms = tonumber(keep) > ms and keep or ms_text
    redis.call('SET', ARGV[7] .. id, token .. ':1:g', 'PX', record_ms)
    local grant = 'g ' .. token .. ' ' .. ms_text .. ' ' .. id
    if n then grant = grant .. ' ' .. n end
    redis.pcall(publish, ARGV[5] .. wake, grant)
    return 0
  end
end
-- Not granted: the head stays the head, and is woken to take the lock. A
-- queue emptied by the LPOP lost its lifetime with it; it gets the
-- deadlines' back.
if redis.call('LPUSH', KEYS[2], head) == 1 then
  local keep_ms = redis.call('PTTL', KEYS[3])
  if keep_ms > 0 then
    redis.call('PEXPIRE', KEYS[2], keep_ms)
  end
end
redis.pcall(publish, ARGV[5] .. (wake or head), '0')
return 0
