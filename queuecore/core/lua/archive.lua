-- archive: a handler failed for good (retries exhausted, SkipRetry, cancelled); keep it archived.
--
-- KEYS[1] <prefix>:{<q>}:t:<id>   task HASH
-- KEYS[2] <prefix>:{<q>}:active   ZSET
-- KEYS[3] <prefix>:{<q>}:archived ZSET  id -> archived at (unix ms)
-- KEYS[4] <prefix>:{<q>}:stats    HASH
-- KEYS[5] <prefix>:{<q>}:done:<id> LIST  wake tokens, pushed when a caller waits for the task
-- ARGV[1] task id
-- ARGV[2] lease number (fencing token)
-- ARGV[3] now, unix ms
-- ARGV[4] error message
-- ARGV[5] stats day suffix ("YYYY-MM-DD")
-- ARGV[6] stats minute suffix ("YYYY-MM-DDTHH:MM")
-- ARGV[7] archive size limit (tasks)
-- ARGV[8] archive age limit: tasks archived before this unix ms are dropped
-- ARGV[9] 1 = count this in the processed/failed stats (an attempt ran and failed), 0 = do not
-- ARGV[10] task-key prefix, <prefix>:{<q>}:t:
-- ARGV[11] the attempt's line for the task's attempt history (attempts.py; "" = none)
-- ARGV[12] when the attempt's handler started, unix ms (kept as started_at; "" = it never started)
-- ARGV[13] attempt history: at most this many lines (attempts.ATTEMPT_HISTORY)
-- ARGV[14] attempt history: at most this many bytes (attempts.ATTEMPT_HISTORY_BYTES)
-- ARGV[15] wake token TTL, ms
-- ARGV[16..22] per-type statistics context (typestats.context); an empty prefix = statistics off, nothing written
-- ARGV[23] the task's type
-- ARGV[24] its handler's duration, ms ("-1" = not known)
-- ARGV[25] the queue's key start, <prefix>:{<q>}: (a trimmed task's unique lock is released only when
--          it starts so: the same slot)
-- Cluster note: the per-type statistics HASHes are built from ARGV[16], same {<q>} tag (typestats.py).
-- Cluster note: hashes of archived tasks trimmed over the limits (<prefix>:{<q>}:t:<id>) are built
-- here from ARGV[10], in the same {<q>} slot, as the unique locks they name that start with ARGV[25].
-- At most 10 are trimmed per call.
-- Returns 1 archived, 0 the lease was lost.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- wrong-type guard, before any write
local err = qc_check_types(KEYS, {"hash", "zset", "zset", "hash"}) if err then return err end
if not qc_holds_lease(KEYS[1], ARGV[2]) then
    return 0
end
redis.call("ZREM", KEYS[2], ARGV[1])  -- first: frees memory, so the rest runs at maxmemory too
redis.call("HSET", KEYS[1], "state", "archived", "error", ARGV[4], "failed_at", ARGV[3])
if ARGV[12] ~= "" then  -- when the last attempt started stays, beside when it failed
    redis.call("HSET", KEYS[1], "started_at", ARGV[12])
    redis.call("HDEL", KEYS[1], "cancel", "archived_by")
else
    redis.call("HDEL", KEYS[1], "started_at", "cancel", "archived_by")
end
qc_wake_if_watched(KEYS[1], KEYS[5], ARGV[15])
qc_push_attempt(KEYS[1], ARGV[11], tonumber(ARGV[13]), tonumber(ARGV[14]))
redis.call("ZADD", KEYS[3], ARGV[3], ARGV[1])
local task_prefix = ARGV[10]
local old = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", "(" .. ARGV[8], "LIMIT", 0, 10)
for _, id in ipairs(old) do
    qc_release_own_lock(qc_task_key(task_prefix, id), ARGV[25], id)
    redis.call("DEL", qc_task_key(task_prefix, id))
    redis.call("ZREM", KEYS[3], id)
end
local excess = redis.call("ZCARD", KEYS[3]) - tonumber(ARGV[7])
if excess > 0 then
    local ids = redis.call("ZRANGE", KEYS[3], 0, math.min(excess, 10) - 1)
    for _, id in ipairs(ids) do
        qc_release_own_lock(qc_task_key(task_prefix, id), ARGV[25], id)
        redis.call("DEL", qc_task_key(task_prefix, id))
        redis.call("ZREM", KEYS[3], id)
    end
end
local acc = qc_ts_new()
if ARGV[9] == "1" then
    qc_count_attempts(KEYS[4], ARGV[5], ARGV[6], 1, 1)
    qc_ts_add(acc, ARGV[23], {1, 2, 4}, tonumber(ARGV[24]))
else
    qc_ts_add(acc, ARGV[23], {4}, nil)
end
qc_ts_write(acc, {unpack(ARGV, 16, 22)})
return 1
