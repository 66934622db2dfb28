-- recover: take back active tasks whose lease expired (their worker died or hung).
-- Each counts as a failed attempt: it goes back to pending as a retry (retried + 1), or to archived
-- once its retries are spent (so a task that kills its worker every time cannot loop forever).
--
-- KEYS[1] <prefix>:{<q>}:active    ZSET
-- KEYS[2] <prefix>:{<q>}:pending   LIST
-- KEYS[3] <prefix>:{<q>}:archived  ZSET
-- KEYS[4] <prefix>:{<q>}:stats     HASH
-- ARGV[1] now, unix ms
-- ARGV[2] at most this many tasks
-- ARGV[3] stats day suffix
-- ARGV[4] stats minute suffix
-- ARGV[5] wake channel
-- ARGV[6] task-key prefix, <prefix>:{<q>}:t:
-- ARGV[7] max_retry of a message without one (message.DEFAULT_MAX_RETRY; negative = retry forever)
-- ARGV[8] error of a task taken back (reasons.WORKER_LOST)
-- ARGV[9] error of one whose message does not decode, archived (reasons.WORKER_LOST_UNDECODABLE)
-- ARGV[10] error of one an operator had asked to cancel, archived (reasons.CANCELLED_BY_OPERATOR)
-- Cluster note: each expired task's HASH (<prefix>:{<q>}:t:<id>) is built from ARGV[6] (same {<q>}
-- tag as KEYS), same slot.
-- Returns {requeued, archived, orphans}: orphans are active ids whose hash was gone, or whose task key
-- holds another Redis type (left untouched), dropped from active; one bad key never blocks the rest.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when one of KEYS has the wrong
-- Redis type; checked before any write, so nothing is written.
-- wrong-type guard, before any write
local err = qc_check_types(KEYS, {"zset", "list", "zset", "hash"}) if err then return err end
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[2]))
local task_prefix = ARGV[6]
local foreign = {}  -- task keys of another Redis type: never written, their ids only dropped from active
for _, id in ipairs(ids) do
    if qc_check_type(qc_task_key(task_prefix, id), "hash") then
        foreign[id] = true
    end
end
local requeued, archived, orphans = 0, 0, 0
for _, id in ipairs(ids) do
    local key = qc_task_key(task_prefix, id)
    redis.call("ZREM", KEYS[1], id)
    local fields = {false}
    if not foreign[id] then
        fields = redis.call("HMGET", key, "msg", "retried", "cancel")
    end
    if not fields[1] then
        orphans = orphans + 1
    else
        local ok, msg = pcall(cjson.decode, fields[1])
        local max_retry = tonumber(ARGV[7])  -- a message without max_retry has the default
        if ok and type(msg) == "table" and type(msg["max_retry"]) == "number" then
            max_retry = msg["max_retry"]
        end
        local retried = tonumber(fields[2] or "0")
        redis.call("HDEL", key, "started_at", "cancel")
        if not fields[3] then  -- a cancelled task is not a failure, as when its worker archives it
            qc_count_attempts(KEYS[4], ARGV[3], ARGV[4], 1, 1)
        end
        local reason
        if fields[3] then
            reason = ARGV[10]
        elseif not ok then
            reason = ARGV[9]
        else
            reason = ARGV[8]
        end
        if fields[3] or not ok or (max_retry >= 0 and retried >= max_retry) then
            redis.call("HSET", key, "state", "archived", "error", reason, "failed_at", ARGV[1])
            redis.call("ZADD", KEYS[3], ARGV[1], id)
            archived = archived + 1
        else
            redis.call("HINCRBY", key, "retried", 1)
            redis.call("HSET", key, "state", "pending", "error", reason, "failed_at", ARGV[1],
                "pending_since", ARGV[1])
            if redis.call("RPUSH", KEYS[2], id) == 1 then
                redis.call("PUBLISH", ARGV[5], "1")
            end
            requeued = requeued + 1
        end
    end
end
return {requeued, archived, orphans}
