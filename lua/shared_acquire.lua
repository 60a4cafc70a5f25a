-- shared_acquire: the parts every kind's acquire script shares; node.rs
-- puts it after shared.lua in front of them (h: the lock hash's KEYS
-- index, c: its fencing counter's, r: the request's replay record's, keep:
-- the record's lifetime in ms; ARGV[1] is the owner field and ARGV[2] the
-- lease in ms).
--
-- take(h, c, r, keep)     a fresh hold of a lock hash that does not exist:
--                         the next token, the owner's field at 1, the
--                         lease; the reply {1, token, 1}, recorded.
-- reenter(h, c, r, keep)  the owner, whose field exists, enters once more:
--                         count + 1, the lease never shortened, the
--                         current token; the reply {1, token, count},
--                         recorded.

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
