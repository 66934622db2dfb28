-- done: a handler succeeded; drop the task or keep it as completed for its retention.
--
-- KEYS[1] <prefix>:{<q>}:t:<id>          task HASH
-- KEYS[2] <prefix>:{<q>}:active          ZSET
-- KEYS[3] <prefix>:{<q>}:completed       ZSET  id -> expiry (unix ms)
-- KEYS[4] <prefix>:{<q>}:stats           HASH  counters
-- KEYS[5] <prefix>:{<q>}:unique:<t>:<d>  STRING (only when the task is unique)
-- ARGV[1] task id
-- ARGV[2] lease number the worker holds (fencing token)
-- ARGV[3] now, unix ms
-- ARGV[4] retention, ms; 0 = delete the task now
-- ARGV[5] result (JSON text)
-- ARGV[6] stats day suffix ("YYYY-MM-DD")
-- ARGV[7] stats minute suffix ("YYYY-MM-DDTHH:MM")
-- Returns 1 done, 0 the lease was lost (the task now belongs to someone else or is gone).
local state = redis.call("HMGET", KEYS[1], "state", "lease")
if state[1] ~= "active" or state[2] ~= ARGV[2] then
    return 0
end
redis.call("ZREM", KEYS[2], ARGV[1])
local retention = tonumber(ARGV[4])
if retention > 0 then
    redis.call("HSET", KEYS[1], "state", "completed", "completed_at", ARGV[3], "result", ARGV[5])
    redis.call("HDEL", KEYS[1], "cancel")
    redis.call("ZADD", KEYS[3], tonumber(ARGV[3]) + retention, ARGV[1])
else
    redis.call("DEL", KEYS[1])
end
if KEYS[5] and redis.call("GET", KEYS[5]) == ARGV[1] then
    redis.call("DEL", KEYS[5])
end
redis.call("HINCRBY", KEYS[4], "processed", 1)
redis.call("HINCRBY", KEYS[4], "processed:" .. ARGV[6], 1)
redis.call("HINCRBY", KEYS[4], "processed:" .. ARGV[7], 1)
return 1
