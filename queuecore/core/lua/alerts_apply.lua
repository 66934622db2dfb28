-- alerts_apply: the alert evaluator takes or renews its lease, then fires, marks pending and resolves
-- alerts, in one step; an evaluator that does not hold the lease changes nothing. Each alert fires
-- once (HSETNX: a field already present is not fired again) and resolves once (HDEL: a field already
-- gone is not resolved again), so two evaluators can never both fire or both resolve one alert.
-- An alert whose rule has a "for" holds pending first: "p:<id>" keeps since when (the first mark),
-- "d:<id>" what it says (rewritten each round, for the dashboard and adminctl).
--
-- KEYS[1] <prefix>:alerts   HASH  "lease" -> holder id, "lease_until" -> unix ms,
--                                 "a:<alert id>" -> the active alert (JSON),
--                                 "p:<alert id>" -> unix ms since which a pending alert holds,
--                                 "d:<alert id>" -> the pending alert (JSON, as of its last round)
-- ARGV[1] holder id (the evaluating worker)
-- ARGV[2] now, unix ms
-- ARGV[3] lease until, unix ms; 0 = give the lease up (when held by this holder) and change nothing else
-- ARGV[4] n: how many alerts to fire
-- ARGV[5] m: how many pending alerts to mark
-- ARGV[6 .. 5+2n] pairs: alert id, alert JSON (fire each unless active; it is no longer pending)
-- ARGV[6+2n .. 5+2n+2m] pairs: alert id, pending alert JSON (pending since now unless pending already)
-- ARGV[6+2n+2m ..] alert ids that no longer hold: resolved when active, no longer pending
-- Returns {held (1/0), {fired ids}, {resolved id, resolved JSON, ...}}.
-- Error reply "QCWRONGTYPE ..." when KEYS[1] is not a hash; nothing is written. Works at maxmemory
-- (see the first write below).
local err = qc_check_type(KEYS[1], "hash")
if err then return err end
local holder = redis.call("HGET", KEYS[1], "lease")
local until_ms = tonumber(redis.call("HGET", KEYS[1], "lease_until") or "0")
local now = tonumber(ARGV[2])
if ARGV[3] == "0" then
    if holder == ARGV[1] then
        redis.call("HDEL", KEYS[1], "lease", "lease_until")
    end
    return {0, {}, {}}
end
if holder and holder ~= ARGV[1] and until_ms > now then
    return {0, {}, {}}
end
-- First a write that never grows memory: at maxmemory Redis then lets the rest through (it refuses a
-- script's first write only), so alerts fire and resolve while Redis is full, the memory alert included.
redis.call("HDEL", KEYS[1], "lease_until")
redis.call("HSET", KEYS[1], "lease", ARGV[1], "lease_until", ARGV[3])
local n, m = tonumber(ARGV[4]), tonumber(ARGV[5])
local fired, resolved = {}, {}
for i = 0, n - 1 do
    local id = ARGV[6 + 2 * i]
    if redis.call("HSETNX", KEYS[1], "a:" .. id, ARGV[7 + 2 * i]) == 1 then
        fired[#fired + 1] = id
    end
    redis.call("HDEL", KEYS[1], "p:" .. id, "d:" .. id)
end
for i = 6 + 2 * n, 5 + 2 * n + 2 * m, 2 do
    redis.call("HSETNX", KEYS[1], "p:" .. ARGV[i], ARGV[2])
    redis.call("HSET", KEYS[1], "d:" .. ARGV[i], ARGV[i + 1])
end
for i = 6 + 2 * n + 2 * m, #ARGV do
    redis.call("HDEL", KEYS[1], "p:" .. ARGV[i], "d:" .. ARGV[i])
    local field = "a:" .. ARGV[i]
    local value = redis.call("HGET", KEYS[1], field)
    if value then
        redis.call("HDEL", KEYS[1], field)
        resolved[#resolved + 1] = ARGV[i]
        resolved[#resolved + 1] = value
    end
end
return {1, fired, resolved}
