-- sem_permits: the number of permits stored with a semaphore.
--
-- KEYS[1]  the number (a string, no TTL)
-- KEYS[2]  a fair semaphore's waiter queue (absent for a plain one)
-- KEYS[3]  a fair semaphore's grant asks (see fsem_acquire.lua)
-- ARGV[1]  'set': store ARGV[2] unless a number is stored already
--          'add': store the stored number (else ARGV[3], the caller's
--                 handle's number) plus ARGV[2], which may be negative
-- ARGV[2]  the number to set, or to add
-- ARGV[3]  the caller's handle's number
-- ARGV[4]  the semaphore's channel
-- ARGV[5]  PUBLISH, or SPUBLISH on a cluster
-- ARGV[6]  prefix of the wake channels (a fair semaphore's waiters', a
--          semaphore's clients')
-- KEYS[4]  a semaphore's waiters list (see sem_acquire.lua); optional
-- KEYS[5]  this call's replay record (lives ARGV[7] ms; optional, with
--          KEYS[4]): a call sent again after its connection broke before
--          the reply gets the first sending's reply and changes nothing
--          (an 'add' is not made twice, a 'set' that stored the number
--          still says it did)
-- ARGV[7]  the replay record's lifetime in ms
-- ARGV[8]  "1" when this call was never sent before, anything else on a
--          re-send
--
-- Returns {1, number} stored; {0, number} not stored ('set': one is
-- stored already; 'add': it would go below zero): nothing is written.
-- A number that went up publishes '0' on the channel (waiters look
-- again), on the wake channel of the fair semaphore's queue head (it
-- takes the permits it now fits), and wakes one client of a semaphore's
-- waiters list per permit added. Error "WRONGTYPE <type> 1" when KEYS[1] is of another type.

local function done(reply)
  if KEYS[5] then return answer(5, ARGV[7], reply) end
  return reply
end
if KEYS[5] then
  local again = replayed(5, ARGV[8])
  if again then return again end
end

local stored = redis.pcall('GET', KEYS[1])
if type(stored) == 'table' and stored.err then
  return redis.error_reply('WRONGTYPE ' .. redis.call('TYPE', KEYS[1])['ok'] .. ' 1')
end
-- A string that is not a number is no number of ours: left alone.
if stored and not tonumber(stored) then return redis.error_reply('WRONGTYPE string 1') end
local now
if ARGV[1] == 'set' then
  if stored then return done({0, tonumber(stored)}) end
  now = tonumber(ARGV[2])
else
  now = tonumber(stored or ARGV[3]) + tonumber(ARGV[2])
  if now < 0 then return done({0, tonumber(stored or ARGV[3])}) end
end
redis.call('SET', KEYS[1], string.format('%d', now))
if now > tonumber(stored or ARGV[3]) then
  redis.call(ARGV[5], ARGV[4], '0')
  local head = redis.pcall('LINDEX', KEYS[2], 0)
  if type(head) == 'string' then
    local ask = redis.pcall('HGET', KEYS[3], head)
    local wake = type(ask) == 'string' and string.match(ask, ' (%S+)$') or head
    redis.pcall(ARGV[5], ARGV[6] .. wake, '0')
  end
  if KEYS[4] then
    -- One listed client per permit added (wake_next, shared_wake.lua);
    -- each woken wait takes what fits.
    for _ = 1, math.min(now - tonumber(stored or ARGV[3]), 16) do
      if not wake_next(4, ARGV[6], ARGV[5], '0') then break end
    end
  end
end
return done({1, now})
