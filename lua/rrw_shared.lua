-- rrw_shared: what the scripts of the read-write lock in Redisson's layout
-- share (the client's `redisson_compatible` setting); protocol/redisson.rs
-- puts it after shared.lua in front of them.
--
-- The layout is Redisson's RReadWriteLock, at the name (KEYS[1]):
--   'mode'                     'read' or 'write'
--   '<uuid>:<id>'              a reader's reentry count
--   '<uuid>:<id>:write'        the writer's reentry count
-- and for each level k of each hold a string
--   '<tag>:<field>:rwlock_timeout:<k>'   with the hold's lease as its TTL
-- (<tag> the name in braces, or the name itself when it has one): Redisson's
-- read unlock sets the hash's TTL to the longest of them, so every
-- lockwarden hold writes its own (a writer's too, which Redisson's writer
-- does not: its value is the write hold's fencing token; a reader's is the
-- token it carries). The hash's TTL covers every hold. Nothing else is
-- written into the hash: Redisson's scripts count its fields and read every
-- field as a count.
--
-- level_key(prefix, field, k)  the timeout key of level k of `field`
-- longest(prefix)              the longest TTL of any hold's timeout keys
--                              (ms), as Redisson's read unlock computes it
--                              (-3 with none)
-- wake(how, message)           publishes message on KEYS[2] (SPUBLISH when
--                              how says so)

local function level_key(prefix, field, k)
  return prefix .. ':' .. field .. ':rwlock_timeout:' .. k
end

local function longest(prefix)
  local best = -3
  local flat = redis.call('HGETALL', KEYS[1])
  for i = 1, #flat, 2 do
    local count = tonumber(flat[i + 1])
    if flat[i] ~= 'mode' and count then
      for k = count, 1, -1 do
        best = math.max(best, redis.call('PTTL', level_key(prefix, flat[i], k)))
      end
    end
  end
  return best
end

local function wake(how, message)
  redis.pcall(how == 'SPUBLISH' and 'SPUBLISH' or 'PUBLISH', KEYS[2], message)
end
