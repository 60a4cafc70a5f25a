-- fair_acquire: take a fair lock in FIFO order, re-enter it, or queue up.
--
-- KEYS[1]  the lock hash: owner field -> reentry count, with a PEXPIRE lease
-- KEYS[2]  the waiter queue (list of owner fields, head first)
-- KEYS[3]  the waiter deadlines (sorted set: owner field -> server ms)
-- KEYS[4]  the lock's fencing-token counter (a string, never given a TTL)
-- KEYS[5]  this request's replay record (lives ARGV[4] ms)
-- KEYS[6]  the waiters' grant asks (hash: owner field -> "<deadline ms>
--          <lease ms> <record ms> <request id> <attempt> <wake id>", see
--          fair_release.lua)
-- ARGV[1]  owner field "<client-uuid>:<owner-id>"
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  waiter timeout in ms: a queued waiter that has not refreshed its
--          deadline for this long is evicted
-- ARGV[4]  replay-record lifetime in ms (> 0)
-- ARGV[5]  "wait" to join the queue (or refresh the deadline there) when the
--          lock cannot be taken now, "try" to only try
-- ARGV[6]  prefix of the waiters' wake channels (prefix .. owner field)
-- ARGV[7]  "SPUBLISH" on a cluster (sharded pub/sub: the channels share the
--          lock's slot), anything else for PUBLISH
-- ARGV[8]  with "wait": this waiter's grant ask ("<lease ms> <record ms>
--          <request id> <attempt> <wake id>": the id of KEYS[5], the
--          waiter's number for this attempt, and where it listens, ARGV[6]
--          .. wake id), stored after the waiter's new deadline
--          so an unlock can hand the lock straight to it; "" for no
--          direct grant (a quorum). A waiter without an ask listens on
--          ARGV[6] .. its owner field.
-- ARGV[9]  how long the queue keys live past a waiter's refresh, in ms
--          (2 x ARGV[3], given as a string so no number is formatted here)
--
-- Returns
--   {1, token, count}  acquired (fresh: count 1 and a new token) or re-entered
--   {0, pttl}          held by another owner: its remaining lease in ms (-1: no TTL)
--   {0, -3}            free, but other waiters are ahead in the queue
--   error "WRONGTYPE <type> <i>" when KEYS[i] holds another type, or the
--                      server's own refusal (OOM, READONLY, ...); nothing
--                      changed (on a refresh, but this waiter's own deadline)
--   error "WRONGKIND <kind>" / "WRONGTYPE foreign-hash 1" when KEYS[1] is
--                      another kind's lock or a hash lockwarden did not
--                      write (wrong_kind, shared.lua); nothing changed
--
-- Side effects: time comes from the server (TIME). When the lock is free,
-- waiters whose deadline passed are evicted first. The lock is only taken
-- when it is free and the queue is empty or headed by this owner (no
-- barging), which also removes the owner from the queue. A free lock with
-- another waiter at the head wakes that head (its message may have been
-- lost). A fresh take is recorded in the hash (':take', see
-- shared_acquire.lua) and a re-entry at KEYS[5], so a replay acquires
-- nothing more. A record that an unlock wrote when it granted the lock to this
-- waiter ("<token>:1:g") is the reply while the grant's hold is still there,
-- and sets its lease to ARGV[2] (never shortening); a grant whose hold is
-- gone (its lease ran out first) is deleted, and the attempt goes on. The queue keys live ARGV[9] ms
-- past the last waiter's refresh. A record a leaving waiter marked "left"
-- answers {0, -3}.

local publish = ARGV[7] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'

local rec = redis.call('GET', KEYS[5])
if rec then
  if rec == 'left' then
    -- A grant this wait gave back when it left the queue (fair_leave.lua).
    return {0, -3}
  end
  local token, count, granted = string.match(rec, '^(%d+):(%d+)(:?g?)$')
  if granted ~= ':g' then
    return {1, tonumber(token), tonumber(count)}
  end
  local held = redis.pcall('HMGET', KEYS[1], ARGV[1], ':token')
  if not held.err and held[1] and held[2] == token then
    redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
    return {1, tonumber(token), tonumber(count)}
  end
  -- The grant's lease ran out before this wait claimed it (its process
  -- was stopped past the waiter's deadline, which bounds a grant's lease):
  -- the lock may be another's now. The grant is gone; the wait goes on as
  -- any attempt, from the back of the queue.
  redis.call('DEL', KEYS[5])
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Nothing below changes the lock's lease, short of taking it: a held
-- lock's PTTL read here is the one to return. -2: no lock.
local pttl = redis.call('PTTL', KEYS[1])
local exists = pttl ~= -2
local head
if exists then
  local got = redis.pcall('HMGET', KEYS[1], ARGV[1], ':token', ':take', ':kind')
  if got.err then return refused(got, 1) end
  local other = wrong_kind(got[4], 'fair')
  if other then return other end
  if got[3] == KEYS[5] and got[2] then
    -- This request's own fresh take made the hold (its reply was lost).
    return {1, tonumber(got[2]), 1}
  end
  if got[1] then
    return reenter(1, 4, 5, ARGV[4], tonumber(got[2]))
  end
  -- Held by another: who heads the queue does not matter now, and stale
  -- waiters are evicted by the unlock (from the head) or by an attempt that
  -- finds the lock free.
else
  -- Free: stale waiters go first, then the head (if any) may take it.
  local stale = redis.pcall('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  if stale.err then return refused(stale, 3) end
  head = redis.pcall('LINDEX', KEYS[2], 0)
  if type(head) == 'table' and head.err then return refused(head, 2) end
  for _, id in ipairs(stale) do
    redis.call('LREM', KEYS[2], 0, id)
    redis.call('ZREM', KEYS[3], id)
    redis.pcall('HDEL', KEYS[6], id)
  end
  if #stale > 0 then
    head = redis.call('LINDEX', KEYS[2], 0)
  end
  if not head or head == ARGV[1] then
    local taken = take(1, 4, 5, false, 'fair')
    if head and taken[1] == 1 then
      redis.call('LPOP', KEYS[2])
      redis.call('ZREM', KEYS[3], ARGV[1])
      redis.pcall('HDEL', KEYS[6], ARGV[1])
    end
    return taken
  end
end

if ARGV[5] == 'wait' then
  local deadline = string.format('%d', now + tonumber(ARGV[3]))
  -- The queue keys may not have been read: each write checks its key's
  -- type, and a wrong type undoes this attempt's own entries first.
  -- ZADD counts only new members: a refresh just moves the deadline, a
  -- newcomer also joins the end of the queue.
  local added = redis.pcall('ZADD', KEYS[3], deadline, ARGV[1])
  if type(added) == 'table' then return refused(added, 3) end
  if added == 1 then
    local pushed = redis.pcall('RPUSH', KEYS[2], ARGV[1])
    if type(pushed) == 'table' then
      redis.call('ZREM', KEYS[3], ARGV[1])
      return refused(pushed, 2)
    end
    if not head then
      head = ARGV[1]
    end
  end
  -- Written at every attempt: the ask names this wait's request, never an
  -- earlier wait's of the same owner, and carries the new deadline.
  if ARGV[8] ~= '' then
    local ask = deadline .. ' ' .. ARGV[8]
    local asked = redis.pcall('HSET', KEYS[6], ARGV[1], ask)
    if type(asked) == 'table' then
      if added == 1 then
        redis.call('ZREM', KEYS[3], ARGV[1])
        redis.call('LREM', KEYS[2], -1, ARGV[1])
      end
      return refused(asked, 6)
    end
    redis.call('PEXPIRE', KEYS[6], ARGV[9])
  end
  -- Live waiters keep the queue alive; if they all die it goes by itself.
  redis.call('PEXPIRE', KEYS[2], ARGV[9])
  redis.call('PEXPIRE', KEYS[3], ARGV[9])
end

if exists then
  return {0, pttl}
end
if head and head ~= ARGV[1] then
  local ask = redis.pcall('HGET', KEYS[6], head)
  local wake = type(ask) == 'string' and string.match(ask, ' (%S+)$') or head
  redis.pcall(publish, ARGV[6] .. wake, '0')
end
return {0, -3}
