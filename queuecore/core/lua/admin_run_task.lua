-- admin_run_task: an operator runs a scheduled, retry or archived task now (moves it to pending),
-- optionally with a new message (its payload edited).
--
-- KEYS[1] <prefix>:{<q>}:t:<id>    task HASH
-- KEYS[2] <prefix>:{<q>}:pending   LIST
-- KEYS[3] <prefix>:{<q>}:scheduled ZSET
-- KEYS[4] <prefix>:{<q>}:retry     ZSET
-- KEYS[5] <prefix>:{<q>}:archived  ZSET
-- ARGV[1] task id
-- ARGV[2] now, unix ms
-- ARGV[3] wake target (qc_publish: "[S]PUBLISH <prefix>:{<q>}:wake")
-- ARGV[4] the task's new message (JSON; "" = keep it): an operator's edit
-- ARGV[5] the edit's record (one line of JSON; "" = none), put first in the hash's "edits" field,
--         which keeps the last 10 edits and at most 8 KiB
-- ARGV[6] the states it may act from, space-separated ("" = every state it can act from): a
--         task in another is left alone (-2), as one it cannot act on; a bulk job's driver adds
--         "until:<unix ms>": past it on Redis's clock, the error reply "QCLEASE ..." and nothing written
-- Returns 1 moved, -1 no such task, or -2 with the task's state when it cannot be run from there.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- wrong-type guard, before any write
local err = qc_check_types(KEYS, {"hash", "list", "zset", "zset", "zset"}) if err then return err end
err = qc_bulk_lease_past(ARGV[6]) if err then return err end
local state = redis.call("HGET", KEYS[1], "state")
if not state then
    return -1
end
if not qc_state_allowed(state, ARGV[6]) then
    return {-2, state}
end
local source = {scheduled = KEYS[3], retry = KEYS[4], archived = KEYS[5]}
if not source[state] then
    return {-2, state}
end
redis.call("ZREM", source[state], ARGV[1])
if ARGV[4] ~= "" then
    redis.call("HSET", KEYS[1], "msg", ARGV[4])
    qc_push_line(KEYS[1], "edits", ARGV[5], 10, 8192)
end
redis.call("HSET", KEYS[1], "state", "pending", "pending_since", ARGV[2])
if redis.call("LPUSH", KEYS[2], ARGV[1]) == 1 then
    qc_publish(ARGV[3], "1")
end
return 1
