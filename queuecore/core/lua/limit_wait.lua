-- limit_wait: a task the concurrency limit held back (and that park put aside) waits for a slot.
--
-- KEYS[1] <prefix>:{lim:<type>}:running[:<key>]  ZSET  "<queue> <id> <lease>" -> slot expiry (unix ms)
-- KEYS[2] <prefix>:{lim:<type>}:waiting[:<key>]  ZSET  "<queue> <id>" -> since (unix ms)
-- ARGV[1] member, "<queue> <id>"
-- ARGV[2] now, unix ms
-- ARGV[3] concurrency limit
-- Returns 1 when a slot came free meanwhile (the caller wakes the task itself: limit_wake), else 0
-- (the task is listed; limit_release hands it to whoever frees a slot).
-- Error reply "QCWRONGTYPE ..." when a key has the wrong Redis type; checked before any write.
local err = qc_check_types(KEYS, {"zset", "zset"}) if err then return err end
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", ARGV[2])
if redis.call("ZCARD", KEYS[1]) < tonumber(ARGV[3]) then
    redis.call("ZREM", KEYS[2], ARGV[1])
    return 1
end
redis.call("ZADD", KEYS[2], "NX", ARGV[2], ARGV[1])
return 0
