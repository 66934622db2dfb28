-- retry: a handler failed and has retries left; schedule the next attempt.
--
-- KEYS[1] <prefix>:{<q>}:t:<id>   task HASH
-- KEYS[2] <prefix>:{<q>}:active   ZSET
-- KEYS[3] <prefix>:{<q>}:retry    ZSET  id -> next attempt (unix ms)
-- KEYS[4] <prefix>:{<q>}:stats    HASH
-- ARGV[1] task id
-- ARGV[2] lease number (fencing token)
-- ARGV[3] now, unix ms
-- ARGV[4] next attempt, unix ms
-- ARGV[5] error message
-- ARGV[6] stats day suffix ("YYYY-MM-DD")
-- ARGV[7] stats minute suffix ("YYYY-MM-DDTHH:MM")
-- ARGV[8] the attempt's line for the task's attempt history (attempts.py; "" = none)
-- ARGV[9] when the attempt's handler started, unix ms (kept as started_at; "" = it never started)
-- ARGV[10] attempt history: at most this many lines (attempts.ATTEMPT_HISTORY)
-- ARGV[11] attempt history: at most this many bytes (attempts.ATTEMPT_HISTORY_BYTES)
-- ARGV[12..18] per-type statistics context (typestats.context); an empty prefix = statistics off, nothing written
-- ARGV[19] the task's type
-- ARGV[20] its handler's duration, ms ("-1" = not known)
-- Cluster note: the per-type statistics HASHes are built from ARGV[12], same {<q>} tag (typestats.py).
-- Returns 1 scheduled for retry, 0 the lease was lost.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- wrong-type guard, before any write
local err = qc_check_types(KEYS, {"hash", "zset", "zset", "hash"}) if err then return err end
if not qc_holds_lease(KEYS[1], ARGV[2]) then
    return 0
end
redis.call("ZREM", KEYS[2], ARGV[1])  -- first: frees memory, so the rest runs at maxmemory too
redis.call("HINCRBY", KEYS[1], "retried", 1)
redis.call("HSET", KEYS[1], "state", "retry", "error", ARGV[5], "failed_at", ARGV[3])
if ARGV[9] ~= "" then  -- when the failed attempt started stays, beside when it failed
    redis.call("HSET", KEYS[1], "started_at", ARGV[9])
    redis.call("HDEL", KEYS[1], "cancel")
else
    redis.call("HDEL", KEYS[1], "started_at", "cancel")
end
qc_push_attempt(KEYS[1], ARGV[8], tonumber(ARGV[10]), tonumber(ARGV[11]))
redis.call("ZADD", KEYS[3], ARGV[4], ARGV[1])
qc_count_attempts(KEYS[4], ARGV[6], ARGV[7], 1, 1)
local acc = qc_ts_new()
qc_ts_add(acc, ARGV[19], {1, 2, 3}, tonumber(ARGV[20]))
qc_ts_write(acc, {unpack(ARGV, 12, 18)})
return 1
