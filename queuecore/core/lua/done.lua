-- done: handlers succeeded; drop each task, or keep it as completed for its retention.
-- Takes a batch of tasks of one queue, so a worker acknowledges many in one round-trip.
--
-- KEYS[1]    <prefix>:{<q>}:active          ZSET
-- KEYS[2]    <prefix>:{<q>}:completed       ZSET  id -> expiry (unix ms)
-- KEYS[3]    <prefix>:{<q>}:stats           HASH  counters
-- KEYS[4..]  <prefix>:{<q>}:t:<id>          task HASH of each task, in ARGV order; then the
--            <prefix>:{<q>}:unique:<t>:<d>  STRING uniqueness locks that ARGV points at
-- ARGV[1] now, unix ms
-- ARGV[2] stats day suffix ("YYYY-MM-DD")
-- ARGV[3] stats minute suffix ("YYYY-MM-DDTHH:MM")
-- ARGV[4] n, the number of tasks
-- ARGV[5] attempt history: at most this many lines (attempts.ATTEMPT_HISTORY)
-- ARGV[6] attempt history: at most this many bytes (attempts.ATTEMPT_HISTORY_BYTES)
-- ARGV[7] wake-key prefix, <prefix>:{<q>}:done: (the wake LIST of a watched task: results.py)
-- ARGV[8] wake token TTL, ms
-- ARGV[9 + 7(i-1) ...] for task i: id, lease number held (fencing token), retention ms (0 = delete
--         the task now), result (JSON text), index into KEYS of its unique lock (0 = none), the
--         attempt's line for the attempt history of a kept task ("" = none), when its handler
--         started (unix ms, kept as started_at of a kept task; "" = not known)
-- ARGV[9 + 7n ...] per-type statistics: the seven context fields (typestats.context), then for
--         task i: its type, its handler's duration in ms ("-1" = not known); an empty prefix (the
--         first context field) = statistics off (WorkerConfig.type_stats): no per-task fields follow
--         and nothing is written
-- Cluster note: the per-type statistics HASHes (<prefix>:{<q>}:ts, ...:ts:<type>:m:<hour>,
-- ...:ts:<type>:d:<month>, typestats.py) are built from the context's prefix, same {<q>} tag.
-- Cluster note: the wake LIST of each watched task (<prefix>:{<q>}:done:<id>) is built from ARGV[7]
-- (same {<q>} tag as KEYS), same slot.
-- Returns one code per task: 1 done, 0 the lease was lost (the task now belongs to someone else or is gone).
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
--
-- Cost: per task one HMGET (the fencing check, which also reads whether a caller waits for it:
-- only then is its wake LIST pushed); the active ZREM, the DEL of the tasks not kept and the three
-- counters are one command each for the whole batch. All reads come first; a read of a wrong-type
-- key fails (pcall), and queue-level keys are type-checked before the first write.
local n = tonumber(ARGV[4])
local out = {}
local owned = {}  -- indexes of the tasks whose lease is still held
local watched = {}  -- ids of owned tasks a caller waits for
local keep = false
for i = 1, n do
    local base = 9 + 7 * (i - 1)
    local state = redis.pcall("HMGET", KEYS[3 + i], "state", "lease", "watch")
    if state["err"] then
        return qc_refuse(KEYS[3 + i], "hash")
    end
    if state[1] ~= "active" or state[2] ~= ARGV[base + 1] then
        out[i] = 0
    else
        out[i] = 1
        owned[#owned + 1] = i
        if state[3] then
            watched[#watched + 1] = ARGV[base]
        end
        keep = keep or tonumber(ARGV[base + 2]) > 0
        local unique = tonumber(ARGV[base + 4])
        if unique > 0 then  -- read now: a wrong-type lock must refuse before any write
            local holder = redis.pcall("GET", KEYS[unique])
            if type(holder) == "table" and holder["err"] then
                return qc_refuse(KEYS[unique], "string")
            end
            if holder ~= ARGV[base] then
                ARGV[base + 4] = "0"  -- someone else's lock now: leave it
            end
        end
    end
end
if #owned == 0 then
    return out
end
do  -- the queue-level keys this call writes (completed only when a task is kept)
    local err = qc_check_type(KEYS[1], "zset") or (keep and qc_check_type(KEYS[2], "zset"))
        or qc_check_type(KEYS[3], "hash")
    if err then return err end
end
-- Writes: the ZREM comes first. It frees memory, so Redis allows it at maxmemory, and once a script
-- has written, Redis lets it finish: acknowledgements still work when the server is full.
local ids, drop = {}, {}
for _, i in ipairs(owned) do
    ids[#ids + 1] = ARGV[9 + 7 * (i - 1)]
end
for first = 1, #ids, 1000 do
    redis.call("ZREM", KEYS[1], unpack(ids, first, math.min(first + 999, #ids)))
end
local done = #owned
qc_count_attempts(KEYS[3], ARGV[2], ARGV[3], done, 0)
if ARGV[9 + 7 * n] ~= "" then  -- per-type statistics: one write per type for the whole batch
    local ctx = 9 + 7 * n
    local acc, processed = qc_ts_new(), {1}
    for _, i in ipairs(owned) do
        local at = ctx + 7 + 2 * (i - 1)
        qc_ts_add(acc, ARGV[at], processed, tonumber(ARGV[at + 1]))
    end
    qc_ts_write(acc, {unpack(ARGV, ctx, ctx + 6)})
end
for _, i in ipairs(owned) do
    local base = 9 + 7 * (i - 1)
    local id, key = ARGV[base], KEYS[3 + i]
    local retention = tonumber(ARGV[base + 2])
    if retention > 0 then
        redis.call("HSET", key, "state", "completed", "completed_at", ARGV[1], "result", ARGV[base + 3])
        if ARGV[base + 6] ~= "" then
            redis.call("HSET", key, "started_at", ARGV[base + 6])
        end
        redis.call("HDEL", key, "cancel")
        qc_push_attempt(key, ARGV[base + 5], tonumber(ARGV[5]), tonumber(ARGV[6]))
        redis.call("ZADD", KEYS[2], tonumber(ARGV[1]) + retention, id)
    else
        drop[#drop + 1] = key
    end
    if tonumber(ARGV[base + 4]) > 0 then
        drop[#drop + 1] = KEYS[tonumber(ARGV[base + 4])]
    end
end
for first = 1, #drop, 1000 do
    redis.call("DEL", unpack(drop, first, math.min(first + 999, #drop)))
end
for _, id in ipairs(watched) do
    qc_wake(qc_done_key(ARGV[7], id), ARGV[8])
end
return out
