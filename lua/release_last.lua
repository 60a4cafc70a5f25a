-- release_last: the common case of release.lua, ahead of the shared parts
-- (see release.lua for KEYS, ARGV and replies). protocol/reentrant.rs puts
-- it first in the reentrant lock's release script, so that a call leaving
-- the last level of an unwaited hold runs no more than the commands it
-- needs: no helper function of the shared parts is defined (each would be
-- made anew on every call) and no record is read.
--
-- It answers a first send (ARGV[5] = "1") with the hold's token (ARGV[4]
-- not "") whose owner holds one level, of the hold with that token, and
-- that no listening waiter marked (no ':wait'): the hash is deleted and 0
-- returned, exactly as `leave_level` in shared_release.lua and the rest of
-- the script do. Everything else falls through to the full script before
-- anything is written. `held`, what a first send read of the hash (nil on
-- a re-send, whose record is looked at first), goes on to `leave_level`,
-- so the hash is read once. The tokens are compared as text first (the
-- client sends the text the scripts wrote, and equal Lua strings are one
-- comparison); as numbers, which parses both, only when the texts differ.

local held
if ARGV[5] == '1' then
  held = redis.pcall('HMGET', KEYS[1], ARGV[1], ':token', ':wait', ':kind')
  if ARGV[4] ~= '' and held[1] == '1' and not held[3] and held[2]
      and (held[2] == ARGV[4] or tonumber(held[2]) == tonumber(ARGV[4])) then
    redis.call('DEL', KEYS[1])
    return 0
  end
end
