-- alerts_apply: the alert evaluator takes or renews its lease, then fires and resolves alerts, in one
-- step; an evaluator that does not hold the lease changes nothing. Each alert fires once (HSETNX: a
-- field already present is not fired again) and resolves once (HDEL: a field already gone is not
-- resolved again), so two evaluators can never both fire or both resolve one alert.
--
-- KEYS[1] <prefix>:alerts   HASH  "lease" -> holder id, "lease_until" -> unix ms,
--                                 "a:<alert id>" -> the active alert (JSON)
-- ARGV[1] holder id (the evaluating worker)
-- ARGV[2] now, unix ms
-- ARGV[3] lease until, unix ms; 0 = give the lease up (when held by this holder) and change nothing else
-- ARGV[4] n: how many alerts to fire
-- ARGV[5 .. 4+2n] pairs: alert id, alert JSON (fire each unless active)
-- ARGV[5+2n ..] alert ids to resolve (each when active)
-- Returns {held (1/0), {fired ids}, {resolved id, resolved JSON, ...}}.
-- Error reply "QCWRONGTYPE ..." when KEYS[1] is not a hash; nothing is written.
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
redis.call("HSET", KEYS[1], "lease", ARGV[1], "lease_until", ARGV[3])
local n = tonumber(ARGV[4])
local fired, resolved = {}, {}
for i = 0, n - 1 do
    local id = ARGV[5 + 2 * i]
    if redis.call("HSETNX", KEYS[1], "a:" .. id, ARGV[6 + 2 * i]) == 1 then
        fired[#fired + 1] = id
    end
end
for i = 5 + 2 * n, #ARGV do
    local field = "a:" .. ARGV[i]
    local value = redis.call("HGET", KEYS[1], field)
    if value then
        redis.call("HDEL", KEYS[1], field)
        resolved[#resolved + 1] = ARGV[i]
        resolved[#resolved + 1] = value
    end
end
return {1, fired, resolved}
