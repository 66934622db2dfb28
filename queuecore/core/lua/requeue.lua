-- requeue: hand an unfinished task back to the front of pending (graceful shutdown); not a failure.
--
-- KEYS[1] <prefix>:{<q>}:t:<id>   task HASH
-- KEYS[2] <prefix>:{<q>}:active   ZSET
-- KEYS[3] <prefix>:{<q>}:pending  LIST
-- ARGV[1] task id
-- ARGV[2] lease number (fencing token)
-- ARGV[3] now, unix ms
-- ARGV[4] wake channel
-- Returns 1 requeued, 0 the lease was lost.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- Wrong-type guard: refuse before writing anything (a Lua error midway is not rolled back).
for i, want in ipairs({"hash", "zset", "list"}) do
    local t = redis.call("TYPE", KEYS[i])["ok"]
    if t ~= "none" and t ~= want then
        return redis.error_reply("QCWRONGTYPE " .. KEYS[i] .. " holds a " .. t .. ", expected a " .. want)
    end
end
local state = redis.call("HMGET", KEYS[1], "state", "lease")
if state[1] ~= "active" or state[2] ~= ARGV[2] then
    return 0
end
redis.call("ZREM", KEYS[2], ARGV[1])
redis.call("HSET", KEYS[1], "state", "pending", "pending_since", ARGV[3])
redis.call("HDEL", KEYS[1], "started_at")
if redis.call("RPUSH", KEYS[3], ARGV[1]) == 1 then
    redis.call("PUBLISH", ARGV[4], "1")
end
return 1
