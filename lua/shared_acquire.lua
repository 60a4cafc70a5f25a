-- shared_acquire: the parts every kind's acquire script shares; protocol/mod.rs
-- puts it after shared.lua in front of them (h: the lock hash's KEYS
-- index, c: its fencing counter's, r: the request's replay record's, keep:
-- the record's lifetime in ms; ARGV[1] is the owner field and ARGV[2] the
-- lease in ms).
--
-- Besides its owners' fields ("<client-uuid>:<owner-id>"), a lock hash
-- keeps three of its own, named with a leading ':' so that no owner field
-- can take their names. They live and die with the hold:
--   ':token'  the hold's fencing token (what the counter gave it, or the
--             quorum's token written back by raise_token.lua)
--   ':take'   the record key of the request whose fresh take made the
--             hold: a re-send of that request finds its reply here
--   ':wait'   a waiter that listens on the lock's channel was refused
--             while this hold stood: the unlock must publish
--   ':kind'   'reentrant' or 'fair': the kind whose hold this is (see
--             wrong_kind in shared.lua)
--
-- take(h, c, r, waited, kind) a fresh hold of a lock hash that does not
--                            exist: the next token, the owner's field at 1,
--                            ':token', ':take', ':kind', the lease; the reply
--                            {1, token, 1}. No record key is written: the
--                            hold itself is the record (replayed_take).
--                            `waited`: other waiters of the taker's
--                            client may still sleep (a client wakes one of
--                            its waiters per message): ':wait' is set.
-- reenter(h, c, r, keep, t)  the owner, whose field exists, enters once
--                            more: count + 1, the lease never shortened,
--                            the hold's token t (nil: a hold without
--                            ':token', whose token is the counter's); the
--                            reply {1, token, count}, recorded at KEYS[r].
-- replayed_take(h, r)        for a re-sent request whose record key is
--                            absent: {1, token, 1} when the hold of KEYS[h]
--                            is the one its fresh take made, else nil.

local function take(h, c, r, waited, kind)
  local token, refusal = next_token(c)
  if not token then return refusal end
  -- Formatted as an integer once (Lua's own number-to-string conversion
  -- goes through floating-point formatting).
  local text = string.format('%d', token)
  if waited then
    redis.call('HSET', KEYS[h], ARGV[1], '1', ':token', text, ':take', KEYS[r], ':kind', kind, ':wait', '1')
  else
    redis.call('HSET', KEYS[h], ARGV[1], '1', ':token', text, ':take', KEYS[r], ':kind', kind)
  end
  redis.call('PEXPIRE', KEYS[h], ARGV[2])
  return {1, token, 1}
end

local function reenter(h, c, r, keep, token)
  if not token then
    token = redis.pcall('GET', KEYS[c])
    if type(token) == 'table' then return refused(token, c) end
    token = tonumber(token or '0')
  end
  local count = redis.pcall('HINCRBY', KEYS[h], ARGV[1], 1)
  if type(count) == 'table' then return refused(count, h) end
  redis.call('PEXPIRE', KEYS[h], ARGV[2], 'GT')
  redis.call('SET', KEYS[r], string.format('%d:%d', token, count), 'PX', keep)
  return {1, token, count}
end

local function replayed_take(h, r)
  local got = redis.pcall('HMGET', KEYS[h], ':take', ':token')
  if got.err or got[1] ~= KEYS[r] or not got[2] then return nil end
  return {1, tonumber(got[2]), 1}
end
