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
-- ARGV[5] wake target (qc_publish: "[S]PUBLISH <prefix>:{<q>}:wake")
-- ARGV[6] task-key prefix, <prefix>:{<q>}:t:
-- ARGV[7] max_retry of a message without one (message.DEFAULT_MAX_RETRY; negative = retry forever)
-- ARGV[8] error of a task taken back (reasons.WORKER_LOST)
-- ARGV[9] error of one whose message does not decode, archived (reasons.WORKER_LOST_UNDECODABLE)
-- ARGV[10] error of one an operator had asked to cancel, archived (reasons.CANCELLED_BY_OPERATOR)
-- ARGV[11] outage threshold, ms: a round that finds no round ran for longer than this (by Redis's
--          clock) begins a grace; 0 turns the grace off (and the recovery HASH is not touched)
-- ARGV[12] grace, ms (the calling worker's lease duration)
-- ARGV[13] attempt history: at most this many lines (attempts.ATTEMPT_HISTORY)
-- ARGV[14] attempt history: at most this many bytes (attempts.ATTEMPT_HISTORY_BYTES)
-- ARGV[15] wake-key prefix, <prefix>:{<q>}:done: (the wake LIST of a watched task: results.py)
-- ARGV[16] wake token TTL, ms
-- ARGV[17..23] per-type statistics context (typestats.context): each task taken back counts as
--         recovered for its type (and processed, failed, then retried or archived, as the stats HASH)
--         an empty prefix = statistics off (WorkerConfig.type_stats), nothing written
-- Cluster note: the per-type statistics HASHes are built from ARGV[17], same {<q>} tag (typestats.py).
-- KEYS[5] <prefix>:{<q>}:recovery  HASH  seen (Redis time of the last round, ms), grace_until (ms)
--
-- Outage grace: when Redis, or every worker's connection to it, was away for longer than the
-- threshold, leases that expired meanwhile belong to owners that could not renew them. The first
-- round after such a silence takes back nothing and starts a grace of ARGV[12] ms, during which no
-- round takes anything back: owners that are alive renew their leases (and write their outcomes)
-- first. Redis's own clock (TIME) measures the silence, so workers' clock skew cannot start one.
-- Cluster note: each expired task's HASH (<prefix>:{<q>}:t:<id>) is built from ARGV[6], and the wake
-- LIST of one archived while a caller waits for it (<prefix>:{<q>}:done:<id>) from ARGV[15] (same
-- {<q>} tag as KEYS), same slot.
-- Returns {requeued, archived, orphans, grace_left_ms, silence_ms, more (1 when the call stopped early
-- after reading 4 MB of messages: more expired tasks may be left), then for each task taken back:
-- id, how (1 requeued, 2 archived: retries spent, 3 archived: undecodable, 4 archived: cancelled),
-- attempt number, max_retry, type ("?" when undecodable)}: orphans are active ids whose hash
-- was gone, or whose task key holds another Redis type (left untouched), dropped from active; one bad
-- key never blocks the rest. grace_left_ms > 0 during a grace (nothing was taken back); silence_ms is
-- the silence that began a grace in this round, else 0. Each task taken back gets a line in its
-- attempt history (attempts.py): no worker (it was lost), fetched_at, ended_at = now, the reason.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when one of KEYS has the wrong
-- Redis type; checked before any write, so nothing is written.
-- wrong-type guard, before any write
local err = qc_check_types(KEYS, {"zset", "list", "zset", "hash", "hash"}) if err then return err end
local threshold = tonumber(ARGV[11])
if threshold > 0 then
    local time = redis.call("TIME")
    local clock = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    local kept = redis.call("HMGET", KEYS[5], "seen", "grace_until")
    local seen, grace_until = tonumber(kept[1]), tonumber(kept[2] or "0")
    local silence = 0
    if seen and clock - seen > threshold then
        silence = clock - seen
        grace_until = clock + tonumber(ARGV[12])
    end
    -- Bookkeeping may be refused at maxmemory (HSET can grow memory): a missed "seen" can only
    -- start a grace later, which delays recovery by one lease and never runs a task twice.
    redis.pcall("HSET", KEYS[5], "seen", clock, "grace_until", grace_until)
    if clock < grace_until then
        return {0, 0, 0, grace_until - clock, silence, 0}
    end
end
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[2]))
local task_prefix = ARGV[6]
local foreign = {}  -- task keys of another Redis type: never written, their ids only dropped from active
for _, id in ipairs(ids) do
    if qc_check_type(qc_task_key(task_prefix, id), "hash") then
        foreign[id] = true
    end
end
local requeued, archived, orphans = 0, 0, 0
-- Messages are decoded (for max_retry and type), and one may be as long as the clients' max_payload_bytes:
-- a call stops before its next task once it has read 4 MB of them (100 of 500 KB held Redis 0.29 s).
local read, more = 0, 0
local taken = {}  -- id, how, attempt, max_retry, type of each task taken back
local type_counts = qc_ts_new()  -- per-type statistics, written once at the end
for _, id in ipairs(ids) do
    if qc_read_enough(read) then
        more = 1
        break
    end
    local key = qc_task_key(task_prefix, id)
    redis.call("ZREM", KEYS[1], id)
    local fields = {false}
    if not foreign[id] then
        fields = redis.call("HMGET", key, "msg", "retried", "cancel", "started_at", "watch")
        read = read + (fields[1] and #fields[1] or 0)
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
        redis.call("HDEL", key, "started_at", "cancel", "archived_by")
        if not fields[3] then  -- a cancelled task is not a failure, as when its worker archives it
            qc_count_attempts(KEYS[4], ARGV[3], ARGV[4], 1, 1)
        end
        local reason, how
        if fields[3] then
            reason, how = ARGV[10], 4
        elseif not ok then
            reason, how = ARGV[9], 3
        else
            reason, how = ARGV[8], 2
        end
        local line = {attempt = retried + 1, result = "archived", ended_at = tonumber(ARGV[1]), error = reason}
        line["fetched_at"] = tonumber(fields[4] or "")
        local counted = {5}
        if not fields[3] then
            counted = {5, 1, 2}
        end
        if fields[3] or not ok or (max_retry >= 0 and retried >= max_retry) then
            counted[#counted + 1] = 4
            redis.call("HSET", key, "state", "archived", "error", reason, "failed_at", ARGV[1])
            redis.call("ZADD", KEYS[3], ARGV[1], id)
            archived = archived + 1
            if fields[5] then
                qc_wake(qc_done_key(ARGV[15], id), ARGV[16])
            end
        else
            how, line["result"] = 1, "retry"
            redis.call("HINCRBY", key, "retried", 1)
            redis.call("HSET", key, "state", "pending", "error", reason, "failed_at", ARGV[1],
                "pending_since", ARGV[1])
            if redis.call("RPUSH", KEYS[2], id) == 1 then
                qc_publish(ARGV[5], "1")
            end
            requeued = requeued + 1
            counted[#counted + 1] = 3
        end
        qc_push_attempt(key, cjson.encode(line), tonumber(ARGV[13]), tonumber(ARGV[14]))
        local type_name = "?"
        if ok and type(msg) == "table" and type(msg["type"]) == "string" then
            type_name = msg["type"]
            qc_ts_add(type_counts, type_name, counted, nil)
        end
        for _, v in ipairs({id, how, retried + 1, max_retry, type_name}) do
            taken[#taken + 1] = v
        end
    end
end
qc_ts_write(type_counts, {unpack(ARGV, 17, 23)})
local out = {requeued, archived, orphans, 0, 0, more}
for _, v in ipairs(taken) do
    out[#out + 1] = v
end
return out
