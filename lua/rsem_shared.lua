-- rsem_shared: what the scripts of the semaphore in Redisson's layout share
-- (the client's `redisson_compatible` setting); protocol/redisson.rs puts it
-- after shared.lua in front of them.
--
-- The layout is Redisson's RSemaphore and RPermitExpirableSemaphore at once:
--   KEYS[1]  the name: a string, the count of free permits (Redisson's
--            counter). Redisson's RSemaphore takes and gives back by DECRBY
--            and INCRBY on it and keeps no other record of its holders.
--   KEYS[2]  Redisson's `{name}:timeout` sorted set: one member per permit
--            held by an id (RPermitExpirableSemaphore's 16-byte ids, or
--            lockwarden's permit ids), scored with its deadline in ms.
--            A lockwarden acquisition of k permits is k members: its permit
--            id, then '<id>#2' .. '<id>#k', all with one deadline. Redisson
--            scores with its client's clock, lockwarden with the server's.
--            A member whose deadline passed is reclaimed by the next acquire
--            of either library: removed, and its permit counted free again.
--
-- now_ms()            the server's clock in ms
-- counter()           the counter at KEYS[1] as a number, false when there
--                     is none; or nil and the refusal when KEYS[1] is not a
--                     counter: "WRONGKIND <kind>" for a lockwarden lock or
--                     semaphore of its own layout, "WRONGTYPE redisson-lock 1"
--                     (and the like, see foreign in shared.lua) for another
--                     program's hash, "WRONGTYPE <type> 1" otherwise
-- members(id)         the members of the acquisition `id` in KEYS[2]: id,
--                     then id#2 .. while they exist
-- announce(count, how) publishes the count of free permits on KEYS[3]
--                     (SPUBLISH when how says so), as Redisson's release
--                     does; a refused publish only leaves waiters to their
--                     recheck

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function counter()
  local got = redis.pcall('GET', KEYS[1])
  if type(got) == 'table' and got.err then
    if redis.call('TYPE', KEYS[1])['ok'] == 'hash' then
      local kind = redis.call('HGET', KEYS[1], ':kind')
      if kind then return nil, redis.error_reply('WRONGKIND ' .. kind) end
      return nil, redis.error_reply('WRONGTYPE ' .. foreign(1) .. ' 1')
    end
    return nil, refused(got, 1)
  end
  if not got then return false end
  local n = tonumber(got)
  if not n then return nil, redis.error_reply('WRONGTYPE string 1') end
  return n
end

local function members(id)
  local all = {id}
  local j = 2
  while redis.call('ZSCORE', KEYS[2], id .. '#' .. j) do
    all[#all + 1] = id .. '#' .. j
    j = j + 1
  end
  return all
end

local function announce(count, how)
  redis.pcall(how == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH', KEYS[3], string.format('%d', count))
end
