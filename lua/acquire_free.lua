-- acquire_free: the common case of acquire.lua, ahead of the shared parts
-- (see acquire.lua for KEYS, ARGV and replies). protocol/reentrant.rs puts
-- it first in the reentrant lock's acquire script, so that a call taking
-- a free lock runs no more than the commands it needs: no helper function
-- of the shared parts is defined (each would be made anew on every call)
-- and no record is read.
--
-- It answers a first send (ARGV[4] = "1") that finds the lock free and
-- whose client is not put in the waiters list by a take (ARGV[5] "0" or
-- left out, "1" or "3"), with the writes the rest of the script would
-- make: the next token, the owner's field at 1, ':token', ':take', ':kind' (and
-- ':wait' when a listening caller's client has other sleeping waiters in
-- KEYS[4]), the client's grant ask taken back (KEYS[5], when given), the
-- lease. Its reply is the bare token, which means
-- {1, token, 1} (see acquire.lua).
-- Everything else falls through to the full script, and so does a refused
-- INCR (a wrong type on KEYS[2]: nothing is written yet, and the full
-- script reports it by key). The take's writes are the ones of `take` in
-- shared_acquire.lua, and the counter's start the one of `next_token` in
-- shared.lua: the tests of both paths hold them to the same results.
--
-- `pttl`, the lock's PTTL, is read here once for the whole script, and
-- `waiting` is ARGV[5] ("0" when left out: a caller that only tries leaves
-- ARGV[5], ARGV[6] and KEYS[4] out, see acquire.lua). acquire.lua goes on
-- from both (nothing is written before it does).
-- PTTL answers for a key of any type: -2 means no lock, and otherwise it
-- is the holder's remaining lease, the reply when the lock is another's.

local pttl = redis.call('PTTL', KEYS[1])
local waiting = ARGV[5] or '0'
if pttl == -2 and ARGV[4] == '1' and (waiting == '0' or waiting == '1' or waiting == '3') then
  local token = redis.pcall('INCR', KEYS[2])
  if type(token) == 'number' then
    if token == 1 then
      local t = redis.call('TIME')
      token = tonumber(t[1]) * 1000000 + tonumber(t[2])
      redis.call('SET', KEYS[2], string.format('%d', token))
    end
    local text = string.format('%d', token)
    if KEYS[5] then
      redis.call('HDEL', KEYS[5], ARGV[6])
    end
    if waiting ~= '0' and redis.call('EXISTS', KEYS[4]) == 1 then
      redis.call('HSET', KEYS[1], ARGV[1], '1', ':token', text, ':take', KEYS[3], ':kind', 'reentrant', ':wait', '1')
    else
      redis.call('HSET', KEYS[1], ARGV[1], '1', ':token', text, ':take', KEYS[3], ':kind', 'reentrant')
    end
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return token
  end
end
