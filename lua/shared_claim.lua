-- shared_claim: a semaphore's claim (see sem_acquire.lua);
-- protocol/semaphore.rs puts it after shared_rw.lua in front of the
-- plain semaphore's acquire, release and leave.
--
-- claim_of(s, now): the client id, permits and deadline of the claim in
-- the snapshot `s` (see sem_acquire.lua) while it stands; nil once it
-- lapsed (or when there is none).
local function claim_of(s, now)
  local c = s.f[':claim']
  if not c then return nil end
  local who, need, till = string.match(c, '^(%S+) (%d+) (%d+)$')
  if not who or tonumber(till) <= now then return nil end
  return who, tonumber(need), tonumber(till)
end
