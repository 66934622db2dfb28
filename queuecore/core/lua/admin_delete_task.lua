-- admin_delete_task: an operator deletes a task that is not running.
--
-- KEYS[1] <prefix>:{<q>}:t:<id>    task HASH
-- KEYS[2] <prefix>:{<q>}:pending   LIST
-- KEYS[3] <prefix>:{<q>}:scheduled ZSET
-- KEYS[4] <prefix>:{<q>}:retry     ZSET
-- KEYS[5] <prefix>:{<q>}:archived  ZSET
-- KEYS[6] <prefix>:{<q>}:completed ZSET
-- KEYS[7] <prefix>:{<q>}:done:<id>  LIST  wake tokens, pushed when a caller waits for the task
-- ARGV[1] task id
-- ARGV[2] the queue's key start, <prefix>:{<q>}:
-- ARGV[3] wake token TTL, ms
-- ARGV[4] the states it may act from, space-separated ("" = every state it can act from): a
--         task in another is left alone (-2), as one it cannot act on; a bulk job's driver adds
--         "until:<unix ms>": past it on Redis's clock, the error reply "QCLEASE ..." and nothing written
-- Cluster note: the unique lock named in the task's "unique" field is only deleted when it starts
-- with ARGV[2], the same "<prefix>:{<q>}:" as KEYS[1], so it shares the slot.
-- Returns 1 deleted, -1 no such task, -2 with the state when it is active (cancel it instead).
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- wrong-type guard
local err = qc_check_types(KEYS, {"hash", "list", "zset", "zset", "zset", "zset"}) if err then return err end
do  -- the unique lock named by the task, which this call may delete (GET must not fail midway)
    local lock = qc_own_lock(KEYS[1], ARGV[2])
    err = lock and qc_check_type(lock, "string") if err then return err end
end
err = qc_bulk_lease_past(ARGV[4]) if err then return err end
local state = redis.call("HGET", KEYS[1], "state")
if not state then
    return -1
end
if not qc_state_allowed(state, ARGV[4]) then
    return {-2, state}
end
if state == "active" then
    return {-2, state}
end
if state == "pending" then
    redis.call("LREM", KEYS[2], 1, ARGV[1])
else
    local zsets = {scheduled = KEYS[3], retry = KEYS[4], archived = KEYS[5], completed = KEYS[6]}
    if zsets[state] then
        redis.call("ZREM", zsets[state], ARGV[1])
    end
end
local unique = qc_own_lock(KEYS[1], ARGV[2])
if unique and redis.call("GET", unique) == ARGV[1] then
    redis.call("DEL", unique)
end
qc_wake_if_watched(KEYS[1], KEYS[7], ARGV[3])
redis.call("DEL", KEYS[1])
return 1
