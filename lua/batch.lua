-- batch: several calls of one node's hot scripts in one EVALSHA.
--
-- node.rs sends calls this way when they are ready together (many tasks of
-- one client locking and unlocking at once), so the server parses, sets up
-- and answers one script call for all of them. In front of this file,
-- protocol/mod.rs puts each batchable script's whole source (shared parts
-- included) as a function of its own KEYS and ARGV:
--
--   ops[i] = function(KEYS, ARGV) <the script> end
--
-- so each call runs exactly the code it would run alone, on its own keys
-- and arguments.
--
-- ARGV[1]             n, the number of calls
-- ARGV[2 .. 1+n]      per call, in order, its shape: its script's index in
--                     ops * 65536 + its number of keys * 256 + its number
--                     of arguments (one argument, not three: the server
--                     makes a string of each)
-- KEYS                every call's keys, one call after the other
-- ARGV[2+n ..]        every call's arguments, one call after the other
--
-- Returns one reply per call, in order: what the call's script returns
-- alone, or, when the call failed (a refusal the script returns, such as
-- "WRONGTYPE hash 1", or an error a command raised), its error text as a
-- string. None of the batched scripts replies with a string, so a string
-- is always an error. A call that fails does not stop the others; like a
-- script run alone, it keeps the writes it made before its error (the
-- scripts check types before they write).

local n = tonumber(ARGV[1])
local out = {}
-- The calls' KEYS and ARGV tables are filled anew for each call, not made
-- anew: no script keeps them past its call, and the entries a call does
-- not have are cleared.
local keys, args = {}, {}
local k, a = 0, 1 + n
for i = 1, n do
  local shape = tonumber(ARGV[1 + i])
  local op, nk, na = math.floor(shape / 65536), math.floor(shape / 256) % 256, shape % 256
  for j = 1, nk do keys[j] = KEYS[k + j] end
  for j = nk + 1, #keys do keys[j] = nil end
  for j = 1, na do args[j] = ARGV[a + j] end
  for j = na + 1, #args do args[j] = nil end
  k, a = k + nk, a + na
  local ok, r = pcall(ops[op], keys, args)
  if not ok then
    r = type(r) == 'table' and (r.err or r.message or 'ERR batched call failed') or tostring(r)
  elseif type(r) == 'table' and r.err then
    r = r.err
  end
  if r == nil then r = false end
  out[i] = r
end
return out
