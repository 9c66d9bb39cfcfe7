-- key_setlimit.lua: set or remove the limit override of a concurrency key.
--
-- KEYS: the queue keys (see joblib.lua). This script builds the concurrency
-- key's keys from K and job keys from J: the holders' IDs come from the
-- key's holders set, those of the jobs chained behind them from their next
-- fields (see the exception in joblib.lua).
-- ARGV[1] the concurrency key
-- ARGV[2] the new override, or "" to remove it
-- ARGV[3] the queue's notice channel (P:queue:{Q}:notices, a shard channel
--         of the queue's slot)
--
-- Returns key_info (joblib.lua) with holders, after the change.
--
-- If the key is left with a job chained behind a holder and more holders
-- than the limit that admits that job (the override, else its default),
-- it would take over a slot beyond the limit:
-- the script publishes "fence|key" on the notice channel, fence the highest
-- among the key's running holders and chained jobs, and their clients give
-- back those not started (batondriver.JobDriver.QueueListen). It changes no
-- chained job itself.
--
-- Lowering the limit below the holders moves the key's available holders,
-- the least urgent first and of those the latest admitted first, back to
-- the head of its parked queue until the holders are within the limit (running holders finish; the key admits no
-- more until it is under the limit). Then parked jobs are promoted into any
-- free slots, which a raised limit makes. Promoted jobs wake fetchers.
local k = ARGV[1]
local now = now_ms()
local h, p, m = key_keys(k)
-- The queue's last fence: a job leased with one no higher ran as the limit
-- changed (see give_back).
local lf = redis.call('HGET', M, 'fence') or '0'
if ARGV[2] == '' then
  redis.call('HDEL', m, 'limit')
  redis.call('HSET', m, 'limit_fence', lf)
else
  redis.call('HSET', m, 'limit', ARGV[2], 'limit_fence', lf)
end
local mv = redis.call('HMGET', m, 'limit', 'def')
local limit = tonumber(mv[1] or mv[2])
if limit then
  local ids = redis.call('SMEMBERS', h)
  if #ids > limit then
    local avail = {}
    for _, id in ipairs(ids) do
      local v = redis.call('HMGET', J .. id, 'state', 'prio')
      if v[1] == 'available' then
        local pos, legacy = redis.call('LPOS', A .. v[2], id), false
        if not pos then
          -- LEGACY: still in the sorted set of an older version, which a
          -- fetch moves behind the listed jobs of its priority: after
          -- them here too (list positions stay below 2^32), in arrival
          -- order.
          local score = redis.call('ZSCORE', legacy_set(), id)
          if score then pos, legacy = 4294967296 + tonumber(score), true end
        end
        if pos then avail[#avail + 1] = {id, tonumber(v[2]), pos, legacy} end
      end
    end
    -- The least urgent first, and the latest admitted of a priority first.
    table.sort(avail, function(x, y)
      if x[2] ~= y[2] then return x[2] > y[2] end
      return x[3] > y[3]
    end)
    local n = math.min(#ids - limit, #avail)
    if n > 0 then
      local pk = {}
      for i = 1, n do
        local id = avail[i][1]
        if avail[i][4] then
          redis.call('ZREM', legacy_set(), id)
        else
          redis.call('LREM', A .. avail[i][2], 1, id)
        end
        redis.call('SREM', h, id)
        redis.call('LPUSH', p, id)
        redis.call('HSET', J .. id, 'state', 'parked', 'parked', int(now))
        pk[#pk + 1] = now
        pk[#pk + 1] = id
      end
      zadd(PK, pk)
      -- The demoted jobs' defaults may differ from def (see promote).
      redis.call('HSET', m, 'mixed', '1')
    end
  end
end
-- The key's parked count may have grown (demotion); an override keeps it
-- listed even when idle.
local np = redis.call('LLEN', p)
if mv[1] or np > 0 or redis.call('SCARD', h) > 0 then redis.call('ZADD', KI, -np, k) end
local avail = new_batch()
promote(avail, k)
wake(flush_available(avail))
local info = key_info(k, true)
-- info: {active, limit, override, holding, running, parked, oldest, fence,
-- chained, holders {id, state, fence, lease_until, next}...}. A chained job
-- would take over a slot beyond the limit that admits it: the override,
-- else its own default, as chain_next asks.
if info[9] > 0 then
  local over = redis.call('HGET', m, 'limit')
  for i = 10, #info do
    local nx = info[i][5]
    if nx ~= '' then
      local lim = tonumber(over or redis.call('HGET', J .. nx, 'limit')) or 0
      if info[4] > lim then
        redis.call('SPUBLISH', ARGV[3], int(info[8]) .. '|' .. k)
        break
      end
    end
  end
end
return info
