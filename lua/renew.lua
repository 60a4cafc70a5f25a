-- renew: extend the leases of many held locks in one call (the watchdog).
--
-- KEYS[1..n]   lock hashes (one cluster slot per call)
-- ARGV[1]      lease in ms (> 0)
-- ARGV[2..n+1] the owner field expected in each KEYS[i]
--
-- Returns an array of n integers: 1 when KEYS[i] still has its owner's field
-- and its lease was extended, 0 when the field is gone (the lock was lost).
--
-- Side effects: PEXPIRE (never shortening) only where the owner's field exists; a lost lock is
-- never re-created and a key of another type is never touched (it reports 0).
-- A hold with a lease of its own (a read-write lock's reader: the field
-- ':' .. owner field holds its deadline in server ms, see shared_rw.lua)
-- also gets its deadline moved to now + lease when that is later (never
-- shortened: a hold extended by its holder to a longer lease keeps it);
-- one whose deadline passed is gone: its fields (a semaphore permit's
-- request ':q:' .. field too) are removed and it
-- reports 0.
-- A permit of a semaphore in Redisson's layout (rsem_shared.lua) is held by
-- members of a sorted set, scored with their deadline: KEYS[i] is that set,
-- and the members of the permit id (id, id#2, ...) get now + lease when that
-- is later; one gone, or whose deadline passed, reports 0 (the next acquire
-- reclaims it).

local out = {}
local now

local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end

local function renew_members(key, id)
  local score = redis.call('ZSCORE', key, id)
  if not score or tonumber(score) <= clock() then return 0 end
  local deadline = clock() + tonumber(ARGV[1])
  if tonumber(score) < deadline then
    local j, member = 1, id
    while true do
      redis.call('ZADD', key, 'XX', string.format('%d', deadline), member)
      j = j + 1
      member = id .. '#' .. j
      if not redis.call('ZSCORE', key, member) then break end
    end
  end
  return 1
end

-- A hold of a read-write lock in Redisson's layout (rrw_shared.lua): the
-- hash has 'mode' 'read' or 'write' and no ':kind'; each level k of the
-- hold has its key '<tag>:<field>:rwlock_timeout:<k>' (<tag>: the key in
-- braces, or the key when it has one), whose TTL is the hold's lease. The
-- hold is gone when its first level's key is; else each level's key and
-- the hash get now + lease when that is later.
local function renew_levels(key, field, count)
  local tag = key
  if not string.find(key, '{', 1, true) then tag = '{' .. key .. '}' end
  local base = tag .. ':' .. field .. ':rwlock_timeout:'
  if redis.call('EXISTS', base .. '1') == 0 then return 0 end
  local lease = tonumber(ARGV[1])
  for k = 1, count do
    if redis.call('PTTL', base .. k) < lease then redis.call('PEXPIRE', base .. k, lease) end
  end
  if redis.call('PTTL', key) < lease then redis.call('PEXPIRE', key, lease) end
  return 1
end

for i = 1, #KEYS do
  local field = ARGV[i + 1]
  local got = redis.pcall('HMGET', KEYS[i], field, ':' .. field, 'mode', ':kind')
  if got.err and redis.call('TYPE', KEYS[i])['ok'] == 'zset' then
    out[i] = renew_members(KEYS[i], field)
  elseif got.err or not got[1] then
    out[i] = 0
  elseif (got[3] == 'read' or got[3] == 'write') and not got[4] then
    out[i] = renew_levels(KEYS[i], field, tonumber(got[1]) or 0)
  elseif got[2] then
    clock()
    if tonumber(got[2]) <= now then
      redis.call('HDEL', KEYS[i], field, ':' .. field, ':q:' .. field)
      out[i] = 0
    else
      if tonumber(got[2]) < now + tonumber(ARGV[1]) then
        redis.call('HSET', KEYS[i], ':' .. field, string.format('%d', now + tonumber(ARGV[1])))
      end
      redis.call('PEXPIRE', KEYS[i], ARGV[1], 'GT')
      out[i] = 1
    end
  else
    redis.call('PEXPIRE', KEYS[i], ARGV[1], 'GT')
    out[i] = 1
  end
end
return out
