-- rw_acquire: take or re-enter one side of a read-write lock.
--
-- KEYS[1]  the lock hash (fields: see shared_rw.lua)
-- KEYS[2]  the lock's fencing-token counter (a string, never given a TTL)
-- KEYS[3]  this request's replay record (lives ARGV[3] ms)
-- ARGV[1]  the caller's field: "<client-uuid>:<owner-id>" for the write
--          side, the same followed by ":r" for the read side
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  replay-record lifetime in ms (> 0)
-- ARGV[4]  "1" when this request was never sent before (its record cannot
--          exist, and is not read), anything else on a re-send
-- ARGV[5]  "0" when the caller only tries, anything else when it waits
--          (listening on the lock's channel) if refused; "2" also says
--          other waits of its client listen, so a grant sets ':wait'
--          (a writer then leaves its mark, see shared_rw.lua)
-- ARGV[6]  "read" or "write": the side
-- ARGV[7]  how long a waiter's mark lasts unless renewed, in ms (a
--          writer's holds new readers back; a reader's makes it a pass)
-- ARGV[8]  this request's id: a fresh read hold keeps it as its identity
--          (':q:<field>'), which the hold's release names, so a release
--          of an earlier read hold of the same owner never frees this one
--          (absent or "": the hold keeps none, and any release of its
--          owner is its own)
-- ARGV[9]  the write side's waiting caller on one master: the first lease
--          in ms of a direct grant to this wait (its ask, see below); left
--          out when it does not ask for one
-- ARGV[10] with ARGV[9]: the waiter's number for this attempt, kept in the
--          ask and named back by the grant's message
--
-- Returns
--   {1, token, count}  acquired at reentry depth count. A write hold's token
--                      is a fresh next_token (count 1) or its own; a read
--                      hold carries the counter's value, the last write
--                      token handed out. A counter that is not there (no
--                      write yet, or lost with the server's data) is
--                      started at the clock first, as next_token starts
--                      one: a read's token is never below a write token
--                      handed out before it, and every later write's is
--                      above it.
--   {0, ms}            refused: a hint of when to look again (the write
--                      holder's remaining lease, the first reader's
--                      deadline, the end of a waiting writer's mark, or
--                      of the latest reader's pass)
--   error "DEADLOCK"   the write side asked by an owner that holds the read
--                      side and not the write side: it would wait for itself
--   error "WRONGTYPE <type> <i>" when KEYS[i] holds another type, or the
--                      server's own refusal; nothing changed
--   error "WRONGKIND <kind>" / "WRONGTYPE foreign-hash 1" when KEYS[1] is
--                      another kind's lock or a hash lockwarden did not
--                      write (wrong_kind, shared.lua); nothing changed
--
-- Rules: many readers or one writer. The writer may also read (its read
-- holds are readers like any other). A writer refused while it waits leaves
-- its mark ':ww:<field>' (until now + ARGV[7]), and readers not yet in are
-- refused while a mark lasts, so a stream of readers cannot starve writers;
-- each attempt of the waiting writer renews its mark (never a holder's
-- lease: each hold's lease is its deadline field), and taking the lock
-- (or rw_leave.lua) removes it. Expired readers are pruned first. A refusal of a
-- waiting caller sets ':wait'. Replays: every grant records its reply at
-- KEYS[3], which a re-send returns.
--
-- Nor can writers starve readers: a waiting reader refused leaves its mark
-- ':wr:<field>' (until now + ARGV[7]; each attempt renews it), the release
-- of a write hold turns the readers' marks into passes (give_passes,
-- shared_rw.lua), a reader with a pass goes in past the writers' marks,
-- and no writer takes the lock (nor is handed it) while a pass stands. A
-- read take removes the reader's mark and pass.
--
-- Direct grants to writers: a waiting writer refused with ARGV[9] leaves,
-- beside its mark, the ask ':wa:<field>' = "<ms> <attempt> <KEYS[3]>"
-- (a refusal without ARGV[9] takes its owner's ask back), and the release
-- that leaves the lock free hands it the write hold (hand_to_writer,
-- shared_rw.lua) with ':take' = KEYS[3]. The wait keeps its request id for
-- its next attempts (re-sends, ARGV[4] not "1"), so an attempt after a
-- grant whose message was lost finds the hold as its own: it answers
-- {1, token, 1} and sets the hold's lease to ARGV[2] (never shortening).
-- A take removes the owner's ask with its mark.
--
-- Every grant also writes 'mode' = 'lockwarden', the only field without a
-- ':' that is not an owner: Redisson's read-write lock takes a hash
-- without 'mode' as free (and would write its own holder into it), and
-- refuses one whose 'mode' is neither 'read' nor 'write', so a Redisson
-- client never takes this lock's name while it is held.

if ARGV[4] ~= '1' then
  local replayed = recorded(3)
  if replayed then return replayed end
end

local now = now_ms()
local me, lease, read = ARGV[1], tonumber(ARGV[2]), ARGV[6] == 'read'
local waits = ARGV[5] ~= '0'
-- An absent hash reads as empty: a snapshot with no holder and no mark.
local s, refusal = snapshot(now, 'rw')
if not s then return refusal end
local f, writer, readers = s.f, s.writer, s.readers

local function grant(token, count)
  if ARGV[5] == '2' and not f[':wait'] then
    -- Other waits of the caller's client may still sleep: this hold's
    -- release must wake them.
    redis.call('HSET', KEYS[1], ':wait', '1')
  end
  redis.call('SET', KEYS[3], string.format('%d:%d', token, count), 'PX', ARGV[3])
  return {1, token, count}
end

local function refuse(hint)
  if waits and not f[':wait'] then
    redis.pcall('HSET', KEYS[1], ':wait', '1')
  end
  return {0, hint}
end

-- The read side's token: the counter's value, the counter started at the
-- clock when it is not there (see Returns). nil and the refusal when
-- KEYS[2] holds another type (nothing changed then).
local function read_token()
  local token = redis.pcall('GET', KEYS[2])
  if type(token) == 'table' then return nil, refused(token, 2) end
  if token then return tonumber(token) end
  local t = redis.call('TIME')
  token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  redis.call('SET', KEYS[2], string.format('%d', token))
  return token
end

if read then
  local deadline = string.format('%d', now + lease)
  if f[me] then
    local token, refusal = read_token()
    if not token then return refusal end
    local count = redis.call('HINCRBY', KEYS[1], me, 1)
    if tonumber(f[':' .. me]) < now + lease then
      redis.call('HSET', KEYS[1], ':' .. me, deadline)
    end
    redis.call('PEXPIRE', KEYS[1], lease, 'GT')
    return grant(token, count)
  end
  local mine = string.sub(me, 1, -3)
  local function refuse_reader(hint)
    if waits then
      -- As a writer's mark, it has its own deadline and the hash's TTL
      -- only has to outlast it. A pass stays a pass.
      if not f[':rp:' .. me] then
        redis.call('HSET', KEYS[1], ':wr:' .. me, string.format('%d', now + tonumber(ARGV[7])))
      end
      redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[7]), 'GT')
    end
    return refuse(hint)
  end
  if writer and writer ~= mine then
    return refuse_reader(s.writer_left)
  end
  if not writer and s.ww > now and not f[':rp:' .. me] then
    return refuse_reader(s.ww - now)
  end
  local token, refusal = read_token()
  if not token then return refusal end
  if f[':wr:' .. me] or f[':rp:' .. me] then
    redis.call('HDEL', KEYS[1], ':wr:' .. me, ':rp:' .. me)
  end
  local fields = {me, '1', ':' .. me, deadline, ':kind', 'rw', 'mode', 'lockwarden'}
  if ARGV[8] and ARGV[8] ~= '' then
    fields[#fields + 1] = ':q:' .. me
    fields[#fields + 1] = ARGV[8]
  end
  redis.call('HSET', KEYS[1], unpack(fields))
  cover(s, lease)
  return grant(token, 1)
end

local deadline = string.format('%d', now + lease)
if writer == me and ARGV[4] ~= '1' and f[':take'] == KEYS[3] then
  -- A release handed this waiting request the write hold: its lease now.
  if tonumber(f[':' .. me]) < now + lease then
    redis.call('HSET', KEYS[1], ':' .. me, deadline)
  end
  redis.call('PEXPIRE', KEYS[1], lease, 'GT')
  return {1, tonumber(f[':token']), 1}
end
if writer == me then
  local count = redis.call('HINCRBY', KEYS[1], me, 1)
  if tonumber(f[':' .. me]) < now + lease then
    redis.call('HSET', KEYS[1], ':' .. me, deadline)
  end
  redis.call('PEXPIRE', KEYS[1], lease, 'GT')
  return grant(tonumber(f[':token'] or '0'), count)
end
if f[me .. ':r'] then
  return redis.error_reply('DEADLOCK the caller holds the read side')
end
if writer or readers > 0 or s.passes > 0 then
  if waits then
    -- The mark has its own deadline; the hash's TTL only has to outlast
    -- it (the holders' leases are their own fields, never the TTL).
    redis.call('HSET', KEYS[1], ':ww:' .. me, string.format('%d', now + tonumber(ARGV[7])))
    if ARGV[9] then
      redis.call('HSET', KEYS[1], ':wa:' .. me, ARGV[9] .. ' ' .. ARGV[10] .. ' ' .. KEYS[3])
    elseif f[':wa:' .. me] then
      redis.call('HDEL', KEYS[1], ':wa:' .. me)
    end
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[7]), 'GT')
  end
  if writer then return refuse(s.writer_left) end
  if readers > 0 then return refuse(s.soonest) end
  return refuse(s.marks_end - now)
end
local token, refusal2 = next_token(2)
if not token then return refusal2 end
redis.call('HSET', KEYS[1], me, '1', ':token', string.format('%d', token), ':' .. me, deadline, ':kind', 'rw', 'mode', 'lockwarden')
-- A ':take' a renewal left behind (it prunes a dead writer's own fields
-- only) names an earlier hold's request: never this hold's.
redis.call('HDEL', KEYS[1], ':ww:' .. me, ':wa:' .. me, ':take')
cover(s, lease)
return grant(token, 1)
