-- rw_leave: a waiter of a read-write lock stops waiting (it gave up, or
-- its wait was dropped): a writer's mark goes, so readers are held back no
-- more; a reader's mark or pass goes, so writers wait for it no more.
--
-- KEYS[1]  the lock hash (fields: see shared_rw.lua)
-- KEYS[2]  the lock's unlock channel (its readers listen there)
-- KEYS[3]  the lock's writers' channel
-- ARGV[1]  the waiter's owner field (a reader's ends in ':r')
-- ARGV[2]  "SPUBLISH" on a cluster, anything else for PUBLISH
-- ARGV[3]  the message to publish when readers may go on
-- KEYS[4]  the lock's fencing-token counter, with ARGV[4..]: the request
--          records the wait's asks for direct grants named (its current
--          request's and those it gave up on after an unknown outcome)
--
-- Returns 1 when the mark was there (or a grant was given back), 0
-- otherwise (leaving is idempotent); error "WRONGTYPE <type> 1", or the
-- server's own refusal.
--
-- Side effects: HDEL of the mark and the writer's ask. With ARGV[4..], a
-- write hold a release handed to one of those requests (its ':take') is
-- given back, one level (a level above it is a later wait's of the same
-- owner, which re-entered it); and the mark stays when the ask beside it
-- names none of them: it is a later wait's of the same owner, and this
-- leave came late. When the last mark went and no writer holds the lock,
-- waiting readers are told, and waiting writers too when no reader holds
-- it (tell_sides, if ':wait' says one listens); a lock a give-back left
-- free goes to another waiting writer's ask first (hand_to_writer); a
-- hash left without holders or marks is deleted.
--
-- A reader's leave: HDEL of its mark and its pass (ARGV[4..] are not
-- read). When that was the last pass and nobody holds the lock, the
-- writers may go in: the lock goes to a waiting writer's ask
-- (hand_to_writer), else the writers are told (tell_sides).

local now = now_ms()
local s, refusal, other = snapshot(now, 'rw')
if not s then
  if other then return 0 end
  return refusal
end
local me = ARGV[1]
if is_reader(me) then
  local pass = s.f[':rp:' .. me]
  if not (pass or s.f[':wr:' .. me]) then return 0 end
  redis.call('HDEL', KEYS[1], ':wr:' .. me, ':rp:' .. me)
  s.f[':wr:' .. me] = nil
  s.f[':rp:' .. me] = nil
  if pass then s.passes = s.passes - 1 end
  if s.writer or s.readers > 0 then return 1 end
  local left = false
  for k in pairs(s.f) do
    local head = string.sub(k, 1, 4)
    if head == ':ww:' or head == ':wr:' or head == ':rp:' then left = true end
  end
  if not left then
    redis.call('DEL', KEYS[1])
    return 1
  end
  if pass and s.passes == 0 and not (KEYS[4] and hand_to_writer(s, now, 4, 3, ARGV[2])) then
    tell_sides(s, now, true, 3, ARGV[2], ARGV[3])
  end
  return 1
end
local mark, ask = ':ww:' .. me, ':wa:' .. me
local mine = {}
for i = 4, #ARGV do mine[ARGV[i]] = true end
local gave = false
if s.writer == me and s.f[':take'] and mine[s.f[':take']] then
  if s.f[me] == '1' then
    redis.call('HDEL', KEYS[1], me, ':token', ':' .. me, ':take')
    s.writer = nil
  else
    redis.call('HINCRBY', KEYS[1], me, -1)
  end
  gave = true
end
local asked = s.f[ask] and string.match(s.f[ask], '^%d+ %d+ (%S+)$')
if s.f[mark] and (#ARGV < 4 or not asked or mine[asked]) then
  redis.call('HDEL', KEYS[1], mark, ask)
  s.f[mark] = nil
  s.f[ask] = nil
elseif not gave then
  return 0
end
local others, ww, readers_wait = false, 0, false
for k, v in pairs(s.f) do
  local head = string.sub(k, 1, 4)
  if head == ':ww:' then
    others = true
    ww = math.max(ww, tonumber(v))
  elseif head == ':wr:' or head == ':rp:' then
    readers_wait = true
  end
end
if s.writer or (others and not gave) then return 1 end
if s.readers == 0 and others and KEYS[4] and hand_to_writer(s, now, 4, 3, ARGV[2]) then
  return 1
end
if s.readers == 0 and not others and not readers_wait then
  redis.call('DEL', KEYS[1])
end
s.ww = ww -- the marks left
tell_sides(s, now, s.readers == 0, 3, ARGV[2], ARGV[3])
return 1
