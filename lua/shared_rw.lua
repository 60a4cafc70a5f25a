-- shared_rw: what the read-write lock's scripts share; protocol/mod.rs puts it
-- after shared.lua in front of them. KEYS[1] is the lock hash.
--
-- A read-write lock is one hash. Its owner fields:
--   "<client-uuid>:<owner-id>"    the write hold's reentry count (one at most)
--   "<client-uuid>:<owner-id>:r"  one reader's reentry count
-- and its own fields (named with a leading ':', see shared_acquire.lua):
--   ':kind'           'rw' ('semaphore' for a semaphore's hash, which has
--                     only "readers": see wrong_kind in shared.lua)
--   ':token'          the write hold's fencing token
--   ':<owner field>'  that hold's lease deadline (server ms), for the writer
--                     and each reader: every hold has its own lease, and one
--                     whose deadline passed is gone (pruned by the next
--                     script that looks). Only a holder (or its watchdog)
--                     moves its deadline; the hash's TTL is only a bound
--                     for cleaning up, never a hold's lease, so nothing a
--                     waiter does to the hash can keep a dead holder in
--   ':q:<permit id>'  a semaphore's: the request whose attempt holds that
--                     permit id's grant (sem_acquire.lua); a reader's
--                     ':q:<owner field>': the request whose fresh take made
--                     the read hold, which its release names
--                     (rw_release.lua)
--   ':ww:<owner field>'  a writer waits, until this deadline (server ms)
--                     unless it renews it: new readers queue behind it
--                     (writer preference); it goes when the writer takes
--                     the lock or gives up (rw_leave.lua)
--   ':wa:<owner field>'  that waiting writer's ask for a direct grant
--                     (one master): "<ms> <attempt> <record key>", the
--                     grant's first lease, the number of the attempt that
--                     left it and that attempt's request record; it lives
--                     and goes with the writer's mark (hand_to_writer)
--   ':wr:<reader field>'  a reader waits (refused while a writer holds
--                     the lock or a writer's mark stands), until this
--                     deadline (server ms) unless its next attempt renews
--                     it; it goes when the reader takes the lock or gives
--                     up (rw_leave.lua)
--   ':rp:<reader field>'  that waiting reader's pass: the release of a
--                     write hold turns every live reader's mark into one
--                     (the same deadline). A pass lets its reader in past
--                     the writers' marks, and no writer takes the lock
--                     while one stands: the readers that waited for a
--                     writer go in before the next writer (neither side
--                     starves the other). It goes when its reader takes
--                     the lock or gives up, or at its deadline
--   ':take'           the request record of the waiting writer a release
--                     handed the write hold to (hand_to_writer): that
--                     request's next attempt finds the hold as its own
--   ':wait'           a listening waiter was refused: the unlock publishes
-- and 'mode' = 'lockwarden' (the read-write lock's, not an owner: it
-- keeps Redisson's read-write lock out, see rw_acquire.lua).
-- The hash's own TTL is at least every live hold's lease (and every
-- waiter's mark and pass), so it vanishes once every holder died.
--
-- now_ms()          the server's clock in ms
-- snapshot(now, kind) the hash as seen now, as a table s: s.f (field ->
--                   value, with expired holders and writers' marks removed
--                   from it and from the server), s.writer (the write
--                   holder's field, or nil), s.writer_left (ms to the end
--                   of its lease), s.readers (live readers),
--                   s.soonest (ms until the first reader's deadline, nil
--                   without readers), s.ww (the latest deadline of a
--                   waiting writer's mark, 0 without), s.passes (live
--                   readers' passes), s.marks_end (the latest deadline of
--                   any mark or pass, 0 without); or nil, the refusal
--                   and whether the refusal is another kind's (or no
--                   kind's) hash at KEYS[1] when KEYS[1] is not a hash of
--                   `kind` ('rw' or 'semaphore'). An empty (absent) hash
--                   is of every kind.
-- is_reader(f)      whether the owner field f is a reader's
-- keep_marks(s, now) re-writes the live marks and passes of s (writers'
--                   and readers') into KEYS[1] (after a DEL), with its
--                   ':kind', a TTL to the latest one, and ':wait' when s
--                   had it: readers held back by a mark are not told the
--                   lock is free (tell_sides), so the next hold's release
--                   must still tell them
-- give_passes(s)    a write hold's release: every live reader's mark of s
--                   becomes that reader's pass (in KEYS[1] and in s)
-- cover(s, ms)      makes the hash's TTL cover a new hold of ms: never
--                   shortened while s had holders, set as it is otherwise
-- wake_waiters(s, how, message)
--                   publishes message on KEYS[2] (SPUBLISH when how says
--                   so) if s has ':wait' (a waiter listens); a refused
--                   PUBLISH only leaves waiters to their lease bound
-- hand_to_writer(s, now, counter, writers, how)
--                   on a free lock (no live holder left, the hash as
--                   keep_marks left it): hands the write hold to a waiting
--                   writer that left an ask beside its live mark (the
--                   one whose mark was renewed longest ago, so the one
--                   waiting longest rather than one that just gave the
--                   lock back and asked again; ties by field; none while a
--                   reader's pass stands),
--                   as its own attempt would have taken
--                   it (next token of KEYS[counter], count 1), with
--                   ':take' naming its record, a lease of the ask's ms cut
--                   to the mark's end (a writer that stopped holds the
--                   name no longer than its mark held readers back), its
--                   mark and ask gone; and says so on the writers' channel
--                   KEYS[writers]: "g <token> <ms> <record key> <attempt>".
--                   Returns whether it granted (not when no writer asked,
--                   or the counter is not a string)
-- tell_sides(s, now, free, writers, how, message)
--                   the read-write lock's wake-up, if s has ':wait' (a
--                   waiter listens): message on the writers' channel
--                   (KEYS[writers]) when the lock is free and no reader's
--                   pass stands, and on the readers' channel (KEYS[2])
--                   unless a live writer's mark (s.ww, as it stands after
--                   the caller's changes) holds new readers back and no
--                   reader has a pass; so a waiter is told only when it
--                   can get in (SPUBLISH when how says so)

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function is_reader(f)
  return string.sub(f, -2) == ':r'
end

local function snapshot(now, kind)
  local all = redis.pcall('HGETALL', KEYS[1])
  if all.err then return nil, refused(all, 1) end
  local f = {}
  for i = 1, #all, 2 do f[all[i]] = all[i + 1] end
  if #all > 0 then
    local other = wrong_kind(f[':kind'] or false, kind)
    if other then return nil, other, true end
  end
  local s = {f = f, readers = 0, ww = 0, passes = 0, marks_end = 0}
  for k, v in pairs(f) do
    local head = string.sub(k, 1, 4)
    if head == ':wr:' or head == ':rp:' then
      local d = tonumber(v)
      if d <= now then
        -- The reader stopped renewing its mark (or never used its pass).
        redis.call('HDEL', KEYS[1], k)
        f[k] = nil
      else
        if head == ':rp:' then s.passes = s.passes + 1 end
        if d > s.marks_end then s.marks_end = d end
      end
    elseif head == ':ww:' then
      local d = tonumber(v)
      if d <= now then
        -- The writer stopped renewing its mark: its ask goes with it.
        local ask = ':wa:' .. string.sub(k, 5)
        redis.call('HDEL', KEYS[1], k, ask)
        f[k] = nil
        -- (Only a field that exists is cleared while pairs() walks f: in
        -- Lua 5.1 a nil stored at a new key may rehash the table.)
        if f[ask] then f[ask] = nil end
      else
        if d > s.ww then s.ww = d end
        if d > s.marks_end then s.marks_end = d end
      end
    elseif string.sub(k, 1, 1) ~= ':' and k ~= 'mode' then
      local d = tonumber(f[':' .. k] or '0')
      if d <= now then
        -- This hold's lease ended: it is gone, whoever still waits.
        if is_reader(k) then
          redis.call('HDEL', KEYS[1], k, ':' .. k, ':q:' .. k)
        else
          redis.call('HDEL', KEYS[1], k, ':' .. k, ':token', ':take')
          if f[':token'] then f[':token'] = nil end
          if f[':take'] then f[':take'] = nil end
        end
        f[k] = nil
        f[':' .. k] = nil
      elseif is_reader(k) then
        s.readers = s.readers + 1
        if not s.soonest or d - now < s.soonest then s.soonest = d - now end
      else
        s.writer = k
        s.writer_left = d - now
      end
    end
  end
  return s
end

local function keep_marks(s, now)
  for k, v in pairs(s.f) do
    local head = string.sub(k, 1, 4)
    if head == ':ww:' then
      redis.call('HSET', KEYS[1], k, v, ':kind', 'rw', 'mode', 'lockwarden')
      local ask = ':wa:' .. string.sub(k, 5)
      if s.f[ask] then
        redis.call('HSET', KEYS[1], ask, s.f[ask])
      end
    elseif head == ':wr:' or head == ':rp:' then
      redis.call('HSET', KEYS[1], k, v, ':kind', 'rw', 'mode', 'lockwarden')
    end
  end
  if s.marks_end > now then
    if s.f[':wait'] then
      redis.call('HSET', KEYS[1], ':wait', '1')
    end
    redis.call('PEXPIRE', KEYS[1], s.marks_end - now)
  end
end

local function give_passes(s)
  local marks, passes = {}, {}
  for k, v in pairs(s.f) do
    if string.sub(k, 1, 4) == ':wr:' then
      marks[#marks + 1] = k
      passes[#passes + 1] = ':rp:' .. string.sub(k, 5)
      passes[#passes + 1] = v
    end
  end
  if #marks == 0 then return end
  redis.call('HDEL', KEYS[1], unpack(marks))
  redis.call('HSET', KEYS[1], unpack(passes))
  -- (s.f gains its new keys after the walk: see snapshot.)
  for i, k in ipairs(marks) do
    s.f[k] = nil
    s.f[passes[2 * i - 1]] = passes[2 * i]
  end
  s.passes = s.passes + #marks
end

local function cover(s, ms)
  if s.writer or s.readers > 0 then
    redis.call('PEXPIRE', KEYS[1], ms, 'GT')
  else
    redis.call('PEXPIRE', KEYS[1], ms)
  end
end

local function wake_waiters(s, how, message)
  if s.f[':wait'] then
    redis.pcall(how == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH', KEYS[2], message)
  end
end

local function tell_sides(s, now, free, writers, how, message)
  if not s.f[':wait'] then return end
  local publish = how == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'
  if free and s.passes == 0 then
    redis.pcall(publish, KEYS[writers], message)
  end
  if s.ww <= now or s.passes > 0 then
    redis.pcall(publish, KEYS[2], message)
  end
end

local function hand_to_writer(s, now, counter, writers, how)
  if s.passes > 0 then return false end
  local to, ask, since
  for k, v in pairs(s.f) do
    if string.sub(k, 1, 4) == ':wa:' then
      local w = string.sub(k, 5)
      local d = tonumber(s.f[':ww:' .. w])
      if d and (not to or d < since or (d == since and w < to)) then
        to, ask, since = w, v, d
      end
    end
  end
  if not to then return false end
  local ms, n, rec = string.match(ask, '^(%d+) (%d+) (%S+)$')
  if not ms then return false end
  local token = next_token(counter)
  if not token then return false end
  token = string.format('%d', token)
  ms = math.min(tonumber(ms), tonumber(s.f[':ww:' .. to]) - now)
  local ms_text = string.format('%d', ms)
  redis.call('HDEL', KEYS[1], ':ww:' .. to, ':wa:' .. to)
  s.f[':ww:' .. to] = nil
  s.f[':wa:' .. to] = nil
  redis.call('HSET', KEYS[1], to, '1', ':token', token, ':' .. to, string.format('%d', now + ms),
    ':take', rec, ':kind', 'rw', 'mode', 'lockwarden')
  -- The hash's TTL (keep_marks: to the latest mark, the grantee's
  -- included) already outlasts the grant's lease, cut to that mark's end.
  redis.pcall(how == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH', KEYS[writers],
    'g ' .. token .. ' ' .. ms_text .. ' ' .. rec .. ' ' .. n)
  return true
end
