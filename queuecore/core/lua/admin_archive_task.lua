-- admin_archive_task: an operator archives ("kills") a pending, scheduled or retry task.
--
-- KEYS[1] <prefix>:{<q>}:t:<id>    task HASH
-- KEYS[2] <prefix>:{<q>}:pending   LIST
-- KEYS[3] <prefix>:{<q>}:scheduled ZSET
-- KEYS[4] <prefix>:{<q>}:retry     ZSET
-- KEYS[5] <prefix>:{<q>}:archived  ZSET
-- KEYS[6] <prefix>:{<q>}:done:<id>  LIST  wake tokens, pushed when a caller waits for the task
-- ARGV[1] task id
-- ARGV[2] now, unix ms
-- ARGV[3] wake token TTL, ms
-- ARGV[4] the states it may act from, space-separated ("" = every state it can act from): a
--         task in another is left alone (-2), as one it cannot act on; a bulk job's driver adds
--         "until:<unix ms>": past it on Redis's clock, the error reply "QCLEASE ..." and nothing written
-- The task is marked archived_by "operator" (the worker's own archive clears the mark).
-- Returns 1 archived, -1 no such task, or -2 with the task's state when it cannot be archived.
-- Pending tasks are found with LREM, O(length of the pending list).
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- wrong-type guard, before any write
local err = qc_check_types(KEYS, {"hash", "list", "zset", "zset", "zset"}) if err then return err end
err = qc_bulk_lease_past(ARGV[4]) if err then return err end
local state = redis.call("HGET", KEYS[1], "state")
if not state then
    return -1
end
if not qc_state_allowed(state, ARGV[4]) then
    return {-2, state}
end
if state == "pending" then
    redis.call("LREM", KEYS[2], 1, ARGV[1])
elseif state == "scheduled" then
    redis.call("ZREM", KEYS[3], ARGV[1])
elseif state == "retry" then
    redis.call("ZREM", KEYS[4], ARGV[1])
else
    return {-2, state}
end
redis.call("HSET", KEYS[1], "state", "archived", "archived_by", "operator")
redis.call("ZADD", KEYS[5], ARGV[2], ARGV[1])
qc_wake_if_watched(KEYS[1], KEYS[6], ARGV[3])
return 1
