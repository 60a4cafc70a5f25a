-- rw_leave: a writer of a read-write lock stops waiting (it gave up, or
-- its wait was dropped): its mark goes, so readers are held back no more.
--
-- KEYS[1]  the lock hash (fields: see shared_rw.lua)
-- KEYS[2]  the lock's unlock channel (its readers listen there)
-- KEYS[3]  the lock's writers' channel
-- ARGV[1]  the writer's owner field
-- ARGV[2]  "SPUBLISH" on a cluster, anything else for PUBLISH
-- ARGV[3]  the message to publish when readers may go on
--
-- Returns 1 when the mark was there, 0 otherwise (leaving is idempotent);
-- error "WRONGTYPE <type> 1", or the server's own refusal.
--
-- Side effects: HDEL of the mark. When it was the last mark and no writer
-- holds the lock, waiting readers are told, and waiting writers too when
-- no reader holds it (tell_sides, if ':wait' says one listens); a hash
-- left without holders or marks is deleted.

local now = now_ms()
local s, refusal, other = snapshot(now, 'rw')
if not s then
  if other then return 0 end
  return refusal
end
local mark = ':ww:' .. ARGV[1]
if not s.f[mark] then return 0 end
redis.call('HDEL', KEYS[1], mark)
s.f[mark] = nil
local others = false
for k, _ in pairs(s.f) do
  if string.sub(k, 1, 4) == ':ww:' then others = true end
end
if not others and not s.writer then
  if s.readers == 0 then
    redis.call('DEL', KEYS[1])
  end
  s.ww = 0 -- no mark is left
  tell_sides(s, now, s.readers == 0, 3, ARGV[2], ARGV[3])
end
return 1
