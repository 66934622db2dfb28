-- admin_cancel_task: an operator asks for a running task to be cancelled.
-- The flag survives a worker missing the pub/sub message: the lease renewal reports it.
--
-- KEYS[1] <prefix>:{<q>}:t:<id>   task HASH
-- ARGV[1] cancel target (qc_publish: "[S]PUBLISH <prefix>:{<q>}:cancel")
-- ARGV[2] message published on it ("<queue> <id>")
-- Returns 1 requested, -1 no such task, -2 with the state when the task is not active.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- wrong-type guard, before any write
local err = qc_check_types(KEYS, {"hash"}) if err then return err end
local state = redis.call("HGET", KEYS[1], "state")
if not state then
    return -1
end
if state ~= "active" then
    return {-2, state}
end
redis.call("HSET", KEYS[1], "cancel", "1")
qc_publish(ARGV[1], ARGV[2])
return 1
