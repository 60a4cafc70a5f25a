-- fsem_release: give back the permits of one acquisition of a fair
-- semaphore, and hand the permits free then to the waiters at the head of
-- the queue, in order, while the head's ask fits.
--
-- KEYS[1]  the semaphore hash (see fsem_acquire.lua)
-- KEYS[2]  the waiter queue
-- KEYS[3]  the waiter deadlines
-- KEYS[4]  the waiters' grant asks
-- KEYS[5]  the number of permits stored with the semaphore, if any
-- ARGV[1]  the permit id
-- ARGV[2]  prefix of the waiters' wake channels
-- ARGV[3]  PUBLISH, or SPUBLISH on a cluster
-- ARGV[4]  prefix of the request records (a grantee's record is ARGV[4]
--          followed by its ask's request id)
-- ARGV[5]  the handle's number of permits (used while none is stored)
-- ARGV[6]  optional: the request whose hold this must be (its ':q:'), as
--          sem_release.lua's ARGV[7]; "" or absent for whichever
--
-- Returns 0 released, -1 not held (its lease ended, or released already,
-- or held under another request than ARGV[6]; nothing changed); error
-- "WRONGTYPE <type> <i>", or the server's own refusal.
--
-- Direct grants: while the live head of the queue asked for grants and
-- its permits fit in what is free, they are its here (its permit id with
-- its permits, a deadline of min(its asked lease, its queue deadline -
-- now), its request at ':q:'), its record says "g", and "g 0 <lease ms>
-- <request id> <attempt>" on its wake channel tells it (the attempt whose
-- ask this was; an ask without one, from an older client, gets the
-- message without it). Heads whose deadline passed
-- are evicted on the way. A head whose permits do not fit stays the head
-- (no one behind it is served first); one without an ask is woken with
-- "0" to take them itself.

local publish = ARGV[3] == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH'
local now = now_ms()
local s, refusal, other = snapshot(now, 'fair-semaphore')
if not s then
  if other then return -1 end
  return refusal
end
if not s.f[ARGV[1]] then return -1 end
if ARGV[6] and ARGV[6] ~= '' and s.f[':q:' .. ARGV[1]] ~= ARGV[6] then return -1 end
redis.call('HDEL', KEYS[1], ARGV[1], ':' .. ARGV[1], ':q:' .. ARGV[1])
s.f[ARGV[1]] = nil
local total = tonumber(ARGV[5])
local stored = redis.pcall('GET', KEYS[5])
if type(stored) == 'string' and tonumber(stored) then total = tonumber(stored) end
local used, holders = 0, 0
for k, v in pairs(s.f) do
  if string.sub(k, 1, 1) ~= ':' and is_reader(k) then
    used = used + tonumber(v)
    holders = holders + 1
  end
end
while used < total do
  local head = redis.pcall('LPOP', KEYS[2])
  if type(head) ~= 'string' then break end
  local ask = redis.pcall('HGET', KEYS[4], head)
  local deadline, take, lease, keep, id, n, wake
  if type(ask) == 'string' then
    deadline, take, lease, keep, id, n, wake = string.match(ask, '^(%d+) (%d+) (%d+) (%d+) (%S+) (%d+) (%S+)$')
    if not lease then
      deadline, take, lease, keep, id, wake = string.match(ask, '^(%d+) (%d+) (%d+) (%d+) (%S+) (%S+)$')
    end
  end
  if not lease then
    deadline = redis.pcall('ZSCORE', KEYS[3], head)
    if type(deadline) ~= 'string' then deadline = nil end
  end
  if deadline and tonumber(deadline) > now then
    if not lease or used + tonumber(take) > total then
      -- It stays the head: woken to take them itself (no ask), or to wait
      -- for more (it does not fit, and nobody behind it goes first).
      if redis.call('LPUSH', KEYS[2], head) == 1 then
        local keep_ms = redis.call('PTTL', KEYS[3])
        if keep_ms > 0 then redis.call('PEXPIRE', KEYS[2], keep_ms) end
      end
      if not lease then redis.pcall(publish, ARGV[2] .. head, '0') end
      break
    end
    local ms = math.min(tonumber(lease), tonumber(deadline) - now)
    local ms_text = string.format('%d', ms)
    redis.call('ZREM', KEYS[3], head)
    redis.call('HDEL', KEYS[4], head)
    redis.call('HSET', KEYS[1], head, take, ':' .. head, string.format('%d', now + ms), ':q:' .. head, id,
      ':kind', 'fair-semaphore')
    if holders > 0 then
      redis.call('PEXPIRE', KEYS[1], ms_text, 'GT')
    else
      redis.call('PEXPIRE', KEYS[1], ms_text)
    end
    holders = holders + 1
    used = used + tonumber(take)
    local record_ms = tonumber(keep) > ms and keep or ms_text
    redis.call('SET', ARGV[4] .. id, 'g', 'PX', record_ms)
    redis.pcall(publish, ARGV[2] .. wake, 'g 0 ' .. ms_text .. ' ' .. id .. (n and (' ' .. n) or ''))
  else
    redis.call('ZREM', KEYS[3], head)
    redis.pcall('HDEL', KEYS[4], head)
  end
end
if holders == 0 then
  redis.call('DEL', KEYS[1])
end
return 0
