-- shared: helpers that protocol/mod.rs puts in front of every script that writes a
-- lock (a script cannot load another one).
--
-- refused(e, i)  the reply for a call on KEYS[i] that the server refused
--                with the error table e. A wrong type becomes
--                "WRONGTYPE <type found> <i>", so the caller can name the
--                key; any other refusal (OOM, READONLY, NOPERM, ...) is
--                passed on as the server worded it, so a full or read-only
--                server is never reported as a wrong type.
-- recorded(r)    the reply {1, token, count} an acquire recorded at KEYS[r]
--                ("<token>:<count>"), or nil when there is no record.
-- replayed(r, first)
--                on a re-send (first ~= '1'), the reply a call that is not an
--                acquire recorded at KEYS[r] with answer() (a table of
--                integers); nil on a first sending or when there is none.
-- answer(r, ms, reply)
--                records reply (a table of integers) at KEYS[r] for ms and
--                returns it: a call that changes a count (a latch's, a
--                semaphore's number) answers through it, so the same call
--                sent again, after a connection broke before its reply,
--                changes nothing a second time and gets the same reply.
-- next_token(i)  the next fencing token of the counter at KEYS[i], or nil
--                and the refusal reply. The counter is INCRed; one that did
--                not exist (a new lock, or a counter lost to FLUSHALL, to a
--                restart without persistence or to eviction) starts at the
--                server's clock in microseconds instead of at 1. Tokens
--                grow by one per fresh hold, far slower than the clock, so
--                a restarted counter is above every token handed out before
--                unless the server's clock now reads earlier than when the
--                lost counter started.
-- wrong_kind(found, want)
--                nil when a lock hash's ':kind' field (`found`, false when
--                absent) is `want`; else the refusal: "WRONGKIND <kind>"
--                when the hash is another lockwarden kind's,
--                "WRONGTYPE <foreign(1)> 1" when it has no ':kind' (a hash
--                some other program wrote). Every lock hash carries its
--                kind from its first write ('reentrant', 'fair', 'rw',
--                'semaphore'), so one name is one kind while it is held, and
--                no script writes into a hash it does not recognise.
-- foreign(i)     what the hash at KEYS[i], which has no ':kind', is:
--                'redisson-rwlock' when it has a 'mode' field (Redisson's
--                read-write lock), 'redisson-lock' when one of its first
--                fields is '<uuid>:<thread id>' (Redisson's lock, fenced
--                lock or fair lock) or '<uuid>:<uuid>' (ports of Redisson
--                such as node-redisson), else 'foreign-hash'. Reads at most a
--                few fields (HSCAN): the hash may be a large one of
--                another program.

local function refused(e, i)
  local text = e.err or tostring(e)
  if string.sub(text, 1, 9) == 'WRONGTYPE' then
    return redis.error_reply('WRONGTYPE ' .. redis.call('TYPE', KEYS[i])['ok'] .. ' ' .. i)
  end
  return redis.error_reply(text)
end

local function recorded(r)
  local rec = redis.call('GET', KEYS[r])
  if not rec then return nil end
  local token, count = string.match(rec, '^(%d+):(%d+)$')
  return {1, tonumber(token), tonumber(count)}
end

local function replayed(r, first)
  if first == '1' then return nil end
  local rec = redis.call('GET', KEYS[r])
  if not rec then return nil end
  local reply = {}
  for n in string.gmatch(rec, '%-?%d+') do reply[#reply + 1] = tonumber(n) end
  return reply
end

local function answer(r, ms, reply)
  local parts = {}
  for i, n in ipairs(reply) do parts[i] = string.format('%d', n) end
  redis.call('SET', KEYS[r], table.concat(parts, ' '), 'PX', ms)
  return reply
end

local function next_token(i)
  local token = redis.pcall('INCR', KEYS[i])
  if type(token) == 'table' then
    return nil, refused(token, i)
  end
  if token == 1 then
    local t = redis.call('TIME')
    token = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', KEYS[i], string.format('%d', token))
  end
  return token
end

local function foreign(i)
  if redis.call('HEXISTS', KEYS[i], 'mode') == 1 then return 'redisson-rwlock' end
  local uuid = '%x+%-%x+%-%x+%-%x+%-%x+'
  local first = redis.call('HSCAN', KEYS[i], '0', 'COUNT', '16')[2]
  for j = 1, #first, 2 do
    if string.match(first[j], '^' .. uuid .. ':%d+$') or string.match(first[j], '^' .. uuid .. ':' .. uuid .. '$') then
      return 'redisson-lock'
    end
  end
  return 'foreign-hash'
end

local function wrong_kind(found, want)
  if found == want then return nil end
  if not found then
    return redis.error_reply('WRONGTYPE ' .. foreign(1) .. ' 1')
  end
  return redis.error_reply('WRONGKIND ' .. found)
end
