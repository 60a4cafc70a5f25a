-- shared: helpers that node.rs puts in front of every script that writes a
-- lock (a script cannot load another one).
--
-- refused(e, i)  the reply for a call on KEYS[i] that the server refused
--                with the error table e. A wrong type becomes
--                "WRONGTYPE <type found> <i>", so the caller can name the
--                key; any other refusal (OOM, READONLY, NOPERM, ...) is
--                passed on as the server worded it, so a full or read-only
--                server is never reported as a wrong type.
-- next_token(i)  the next fencing token of the counter at KEYS[i], or nil
--                and the refusal reply. The counter is INCRed; one that did
--                not exist (a new lock, or a counter lost to FLUSHALL, to a
--                restart without persistence or to eviction) starts at the
--                server's clock in microseconds instead of at 1. Tokens
--                grow by one per fresh hold, far slower than the clock, so
--                a restarted counter is above every token handed out before
--                unless the server's clock now reads earlier than when the
--                lost counter started.
--
-- The parts the acquire and release scripts of every kind share (h: the
-- lock hash's KEYS index, c: its counter's, r: the request's replay
-- record's, keep: the record's lifetime in ms; ARGV[1] is always the owner
-- field and ARGV[2] the lease in ms):
--
-- take(h, c, r, keep)     a fresh hold of a lock hash that does not exist:
--                         the next token, the owner's field at 1, the
--                         lease; the reply {1, token, 1}, recorded.
-- reenter(h, c, r, keep)  the owner, whose field exists, enters once more:
--                         count + 1, the lease never shortened, the
--                         current token; the reply {1, token, count},
--                         recorded.
-- leave_level(h, c, r, t) one level of the hold whose token is ARGV[t] (''
--                         when unknown) is left. Returns the script's reply
--                         when that is all (a replay's recorded reply, -1
--                         when the hold is not this one, n > 0 levels left,
--                         a refusal), or nil when the last level went: the
--                         hash (whose only field was the owner's) is
--                         deleted, the release recorded when no token
--                         tells later holds apart, and the caller wakes
--                         the waiters. ARGV[2] is then the lease to
--                         re-apply while levels remain (0: leave it), and
--                         ARGV[3] the record's lifetime.

local function refused(e, i)
  local text = e.err or tostring(e)
  if string.sub(text, 1, 9) == 'WRONGTYPE' then
    return redis.error_reply('WRONGTYPE ' .. redis.call('TYPE', KEYS[i])['ok'] .. ' ' .. i)
  end
  return redis.error_reply(text)
end

local function next_token(i)
  local token = redis.pcall('INCR', KEYS[i])
  if type(token) == 'table' then
    return nil, refused(token, i)
  end
  if token == 1 then
    local t = redis.call('TIME')
    token = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', KEYS[i], string.format('%d', token))
  end
  return token
end

local function take(h, c, r, keep)
  local token, refusal = next_token(c)
  if not token then return refusal end
  redis.call('HSET', KEYS[h], ARGV[1], '1')
  redis.call('PEXPIRE', KEYS[h], ARGV[2])
  -- Formatted as integers once (Lua's own number-to-string conversion goes
  -- through floating-point formatting).
  redis.call('SET', KEYS[r], string.format('%d:1', token), 'PX', keep)
  return {1, token, 1}
end

local function reenter(h, c, r, keep)
  local token = redis.pcall('GET', KEYS[c])
  if type(token) == 'table' then return refused(token, c) end
  token = tonumber(token or '0')
  local count = redis.pcall('HINCRBY', KEYS[h], ARGV[1], 1)
  if type(count) == 'table' then return refused(count, h) end
  redis.call('PEXPIRE', KEYS[h], ARGV[2], 'GT')
  redis.call('SET', KEYS[r], string.format('%d:%d', token, count), 'PX', keep)
  return {1, token, count}
end

local function leave_level(h, c, r, t)
  local rec = redis.call('GET', KEYS[r])
  if rec then
    return tonumber(rec)
  end
  local count = redis.pcall('HGET', KEYS[h], ARGV[1])
  if type(count) == 'table' then
    return refused(count, h)
  end
  if not count then
    return -1
  end
  if ARGV[t] ~= '' then
    local token = redis.pcall('GET', KEYS[c])
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
  return nil
end
