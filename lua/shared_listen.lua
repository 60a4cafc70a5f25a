-- shared_listen: putting a waiting client in a lock's waiters list (see
-- shared_wake.lua); protocol/mod.rs puts it in front of the acquire
-- scripts of the kinds whose release wakes one client at a time.
--
-- listen(l, id, ttl, front)
--     puts the client `id` in the waiters list KEYS[l] unless it is there
--     (at the front with `front`, else at the end), and keeps the list
--     `ttl` ms and a second at least. Returns the client's place in the
--     list (0: the front). A list of another type is left alone (the
--     waits then wake at their lease bound): nil.

local function listen(l, id, ttl, front)
  ttl = string.format('%d', ttl + 1000)
  local at = redis.pcall('LPOS', KEYS[l], id)
  if type(at) == 'table' then return nil end
  if not at then
    local n = redis.pcall(front and 'LPUSH' or 'RPUSH', KEYS[l], id)
    if type(n) ~= 'number' then return nil end
    at = front and 0 or n - 1
    if n == 1 then
      redis.call('PEXPIRE', KEYS[l], ttl)
      return at
    end
  end
  redis.call('PEXPIRE', KEYS[l], ttl, 'GT')
  return at
end
