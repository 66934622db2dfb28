-- admin_cancel_task: an operator asks for a running task to be cancelled.
-- The flag survives a worker missing the pub/sub message: the lease renewal reports it.
--
-- KEYS[1] <prefix>:{<q>}:t:<id>   task HASH
-- ARGV[1] cancel channel
-- ARGV[2] message published on it ("<queue> <id>")
-- Returns 1 requested, -1 no such task, -2 with the state when the task is not active.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- Wrong-type guard: refuse before writing anything (a Lua error midway is not rolled back).
for i, want in ipairs({"hash"}) do
    local t = redis.call("TYPE", KEYS[i])["ok"]
    if t ~= "none" and t ~= want then
        return redis.error_reply("QCWRONGTYPE " .. KEYS[i] .. " holds a " .. t .. ", expected a " .. want)
    end
end
local state = redis.call("HGET", KEYS[1], "state")
if not state then
    return -1
end
if state ~= "active" then
    return {-2, state}
end
redis.call("HSET", KEYS[1], "cancel", "1")
redis.call("PUBLISH", ARGV[1], ARGV[2])
return 1
