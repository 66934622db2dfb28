-- park: put an active task aside until a later time without counting an attempt: a handler's
-- Snooze, or a task held back by its type's concurrency or rate limit (flow.py).
--
-- KEYS[1] <prefix>:{<q>}:t:<id>     task HASH
-- KEYS[2] <prefix>:{<q>}:active     ZSET
-- KEYS[3] <prefix>:{<q>}:scheduled  ZSET  id -> due (unix ms)
-- ARGV[1] task id
-- ARGV[2] lease number (fencing token)
-- ARGV[3] now, unix ms
-- ARGV[4] due, unix ms (the forwarder moves it to pending then, or limit_wake sooner)
-- ARGV[5] 1 = a snooze: the task's "snoozed" count goes up by one; 0 = held back by a limit
-- ARGV[6] why it waits ("waiting" field: shown by operator tools; "" = none)
-- ARGV[7] the attempt's line for the task's attempt history (attempts.py; "" = none)
-- ARGV[8] attempt history: at most this many lines
-- ARGV[9] attempt history: at most this many bytes
-- The task's "scheduled_at" is set to ARGV[3]: when it entered scheduled (a bulk job of the state acts
-- only on tasks there when it was made: _lib.lua qc_bulk_ids).
-- Returns 1 parked, 0 the lease was lost. "retried" never changes: no attempt is consumed.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key has the wrong Redis
-- type; checked before any write, so nothing is written.
local err = qc_check_types(KEYS, {"hash", "zset", "zset"}) if err then return err end
if not qc_holds_lease(KEYS[1], ARGV[2]) then
    return 0
end
redis.call("ZREM", KEYS[2], ARGV[1])  -- first: frees memory
if ARGV[5] == "1" then
    redis.call("HINCRBY", KEYS[1], "snoozed", 1)
end
redis.call("HSET", KEYS[1], "state", "scheduled", "waiting", ARGV[6], "scheduled_at", ARGV[3])
redis.call("HDEL", KEYS[1], "started_at", "cancel")
if ARGV[6] == "" then
    redis.call("HDEL", KEYS[1], "waiting")
end
qc_push_attempt(KEYS[1], ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9]))
redis.call("ZADD", KEYS[3], ARGV[4], ARGV[1])
return 1
