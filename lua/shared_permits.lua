-- shared_permits: handing a semaphore's free permits to its waiting
-- clients; protocol/semaphore.rs puts it after shared.lua, shared_rw.lua
-- and shared_wake.lua in front of the scripts that free permits. KEYS[1]
-- is the semaphore hash, KEYS[3] its waiters list, KEYS[4] (optional) the
-- waiters' grant asks (see sem_acquire.lua).
--
-- give_back(s, id) removes the permit id `id` of the snapshot `s` (the
-- hash goes with its last holder); permits_in_force(handle) is the number
-- stored at KEYS[5], else the handle's.
--
-- hand_out(s, now, publish, msg, total, prefix, rec_prefix)
--     wakes one listed client per permit free (`total` less those the
--     live holders of the snapshot `s` hold, s.f as the hash is now), at
--     most 16 clients: wake_next (shared_wake.lua) on the client's wake
--     channel (prefix .. client id) with `msg`. With KEYS[4], a client
--     whose ask ("<ms> <request id> <attempt> <permits> <permit id>") fits
--     in the permits still free is handed them instead: its permit id is
--     written as its waiting attempt would have written it (the permits,
--     a deadline <ms> from now, ':q:' = the request id, so the request's
--     next attempt finds the grant as its own), the hash's TTL covers it,
--     and the message is "g 0 <ms> <rec_prefix .. request id> <attempt>"
--     (a grant's message, as the reentrant lock's, with no token). A
--     grant nobody heard is taken back at once (the hash deleted when it
--     made it). A client whose ask does not fit is woken: its attempt is
--     refused and puts it back at the front.

local function hand_out(s, now, publish, msg, total, prefix, rec_prefix)
  local used, holders = 0, 0
  for k, v in pairs(s.f) do
    if string.sub(k, 1, 1) ~= ':' and is_reader(k) then
      used, holders = used + tonumber(v), holders + 1
    end
  end
  local free = total - used
  -- A standing claim keeps its permits for its client.
  local claimant, need = claim_of(s, now)
  need = need or 0
  local function give(client, ask)
    local ms, req, n, take, id = string.match(ask, '^(%d+) (%S+) (%d+) (%d+) (%S+)$')
    if not ms then return nil end
    take = tonumber(take)
    local kept = (claimant and client ~= claimant) and need or 0
    if take > free - kept or s.f[id] then return nil end
    if client == claimant then
      -- Served: the claim ends.
      redis.call('HDEL', KEYS[1], ':claim')
      claimant, need = nil, 0
    end
    redis.call('HSET', KEYS[1], id, take, ':' .. id, string.format('%d', now + tonumber(ms)), ':q:' .. id, req, ':kind', 'semaphore')
    if holders == 0 then
      redis.call('PEXPIRE', KEYS[1], ms)
    else
      redis.call('PEXPIRE', KEYS[1], ms, 'GT')
    end
    holders, free, s.f[id] = holders + 1, free - take, take
    local function undo()
      holders, free, s.f[id] = holders - 1, free + take, nil
      if holders == 0 then
        redis.call('DEL', KEYS[1])
      else
        redis.call('HDEL', KEYS[1], id, ':' .. id, ':q:' .. id)
      end
    end
    return 'g 0 ' .. ms .. ' ' .. rec_prefix .. req .. ' ' .. n, undo
  end
  local grant = KEYS[4] and {a = 4, give = give}
  for _ = 1, 16 do
    -- Nobody to serve: nothing free, or less than a standing claim needs.
    if free <= 0 or free < need then return end
    local before = free
    if not wake_next(3, prefix, publish, msg, grant) then return end
    -- A plain wake-up counts for one permit.
    if free == before then free = free - 1 end
  end
end

-- Gives back the permit id `id` that the snapshot `s` has: its fields go,
-- and the hash with its last holder.
local function give_back(s, id)
  if s.readers <= 1 then
    redis.call('DEL', KEYS[1])
  else
    redis.call('HDEL', KEYS[1], id, ':' .. id, ':q:' .. id)
  end
  s.f[id] = nil
end

-- The number of permits in force: the one stored at KEYS[5], else the
-- handle's `handle`; nil when KEYS[5] holds something else.
local function permits_in_force(handle)
  local stored = redis.pcall('GET', KEYS[5])
  if type(stored) == 'table' then return nil end
  return tonumber(stored or handle)
end
