-- done: handlers succeeded; drop each task, or keep it as completed for its retention.
-- Takes a batch of tasks of one queue, so a worker acknowledges many in one round-trip.
--
-- KEYS[1]    <prefix>:{<q>}:active          ZSET
-- KEYS[2]    <prefix>:{<q>}:completed       ZSET  id -> expiry (unix ms)
-- KEYS[3]    <prefix>:{<q>}:stats           HASH  counters
-- KEYS[4..]  <prefix>:{<q>}:t:<id>          task HASH of each task, in ARGV order; then the
--            <prefix>:{<q>}:unique:<t>:<d>  STRING uniqueness locks that ARGV points at
-- ARGV[1] now, unix ms
-- ARGV[2] stats day suffix ("YYYY-MM-DD")
-- ARGV[3] stats minute suffix ("YYYY-MM-DDTHH:MM")
-- ARGV[4] n, the number of tasks
-- ARGV[5 + 5(i-1) ...] for task i: id, lease number held (fencing token), retention ms (0 = delete
--         the task now), result (JSON text), index into KEYS of its unique lock (0 = none)
-- Returns one code per task: 1 done, 0 the lease was lost (the task now belongs to someone else or is gone).
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- Wrong-type guard: refuse before writing anything (a Lua error midway is not rolled back).
local function wrong(key, want)
    local t = redis.call("TYPE", key)["ok"]
    if t ~= "none" and t ~= want then
        return redis.error_reply("QCWRONGTYPE " .. key .. " holds a " .. t .. ", expected a " .. want)
    end
end
for i = 1, #KEYS do
    local bad = wrong(KEYS[i], i <= 2 and "zset" or (i <= 3 + tonumber(ARGV[4]) and "hash" or "string"))
    if bad then
        return bad
    end
end
local n = tonumber(ARGV[4])
local out = {}
local done = 0
for i = 1, n do
    local base = 5 + 5 * (i - 1)
    local id, lease = ARGV[base], ARGV[base + 1]
    local key = KEYS[3 + i]
    local state = redis.call("HMGET", key, "state", "lease")
    if state[1] ~= "active" or state[2] ~= lease then
        out[i] = 0
    else
        redis.call("ZREM", KEYS[1], id)
        local retention = tonumber(ARGV[base + 2])
        if retention > 0 then
            redis.call("HSET", key, "state", "completed", "completed_at", ARGV[1], "result", ARGV[base + 3])
            redis.call("HDEL", key, "cancel")
            redis.call("ZADD", KEYS[2], tonumber(ARGV[1]) + retention, id)
        else
            redis.call("DEL", key)
        end
        local unique = tonumber(ARGV[base + 4])
        if unique > 0 and redis.call("GET", KEYS[unique]) == id then
            redis.call("DEL", KEYS[unique])
        end
        out[i] = 1
        done = done + 1
    end
end
if done > 0 then
    redis.call("HINCRBY", KEYS[3], "processed", done)
    redis.call("HINCRBY", KEYS[3], "processed:" .. ARGV[2], done)
    redis.call("HINCRBY", KEYS[3], "processed:" .. ARGV[3], done)
end
return out
