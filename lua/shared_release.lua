-- shared_release: the part every kind's release script shares; protocol/mod.rs
-- puts it after shared.lua in front of them.
--
-- leave_level(h, c, r, t, fresh, held, kind)
--                          one level of ARGV[1]'s hold of the lock hash
--                          KEYS[h] whose token is ARGV[t] ('' when unknown;
--                          compared with the counter KEYS[c]) is left.
--                          Returns the script's reply when that is all (a
--                          replay's recorded reply from KEYS[r], -1 when
--                          the hold is not this one, n > 0 levels left, a
--                          refusal), or nil and a flag when the last level
--                          went: the hash (whose only owner was this one)
--                          is deleted, the release recorded when no token
--                          tells later holds apart, and the caller wakes
--                          the waiters. The flag says whether a listening
--                          waiter was refused during the hold (the hash's
--                          ':wait', see shared_acquire.lua); the hold's
--                          token is its ':token' (the counter's value for
--                          a hold without one). ARGV[2] is the lease to re-apply
--                          while levels remain (0: leave it), ARGV[3] the
--                          record's lifetime in ms. `fresh`: the request
--                          was never sent before, so its record is not read.
--                          `held`: the reply of HMGET KEYS[h] ARGV[1]
--                          ':token' ':wait' ':kind' (pcall) when the script
--                          read it already and wrote nothing since; nil:
--                          read here. `kind`: the hash's ':kind' of this
--                          lock kind; a hash of another kind (or of none)
--                          is not this hold: -1.

local function leave_level(h, c, r, t, fresh, held, kind)
  if not fresh then
    local rec = redis.call('GET', KEYS[r])
    if rec then
      return tonumber(rec)
    end
  end
  local got = held or redis.pcall('HMGET', KEYS[h], ARGV[1], ':token', ':wait', ':kind')
  if got.err then
    return refused(got, h)
  end
  local count = got[1]
  if not count or got[4] ~= kind then
    return -1
  end
  if ARGV[t] ~= '' then
    local token = got[2]
    if not token then
      token = redis.pcall('GET', KEYS[c])
    end
    if type(token) == 'table' or tonumber(token or '0') ~= tonumber(ARGV[t]) then
      return -1
    end
  end
  count = tonumber(count) - 1
  if count > 0 then
    redis.call('HINCRBY', KEYS[h], ARGV[1], -1)
    if tonumber(ARGV[2]) > 0 then
      redis.call('PEXPIRE', KEYS[h], ARGV[2], 'GT')
    end
    redis.call('SET', KEYS[r], count, 'PX', ARGV[3])
    return count
  end
  redis.call('DEL', KEYS[h])
  if ARGV[t] == '' then
    redis.call('SET', KEYS[r], 0, 'PX', ARGV[3])
  end
  return nil, got[3] ~= false
end
