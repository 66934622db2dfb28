-- queue_metrics: read one queue's gauges and counters for a metrics scrape; writes nothing. A scrape
-- sends one call per queue, all in one pipeline (queue_metrics.py): its cost grows with the number
-- of queues, never with the number of tasks.
--
-- KEYS[1] <prefix>:{<q>}:pending    LIST
-- KEYS[2] <prefix>:{<q>}:active     ZSET
-- KEYS[3] <prefix>:{<q>}:scheduled  ZSET
-- KEYS[4] <prefix>:{<q>}:retry      ZSET
-- KEYS[5] <prefix>:{<q>}:archived   ZSET
-- KEYS[6] <prefix>:{<q>}:completed  ZSET
-- KEYS[7] <prefix>:{<q>}:paused     STRING (any type reads as paused)
-- KEYS[8] <prefix>:{<q>}:stats      HASH  processed, failed (totals)
-- KEYS[9] <prefix>:{<q>}:ts         HASH  type -> packed per-type counters (typestats.py)
-- ARGV[1] task-key prefix, <prefix>:{<q>}:t:
-- ARGV[2] how many task HASHes to sample for the memory estimate, over all states (0: no estimate):
--         shared out in proportion to each state's size, at least one per state holding tasks, spread
--         evenly over each state (Inspector's memory_sample_plan shares them out the same way)
-- ARGV[3] where the evenly spaced samples start, as a fraction (0 to 1) of their spacing (the caller
--         draws it at random, so that data with a period does not fool every scrape the same way)
-- Cluster note: the oldest pending task's HASH and the sampled task HASHes (<prefix>:{<q>}:t:<id>)
-- are built from ARGV[1], same {<q>} tag as KEYS, same slot.
-- Returns {pending, active, scheduled, retry, archived, completed, paused (0/1), the oldest pending
-- task's id ("" = none), its pending_since ("" = never went back to pending) and its msg (""), the
-- memory estimate in bytes (the keys, plus each state's sampled average task HASH times its size;
-- -1 = not known: MEMORY denied), processed total, failed total (as stored: text), then for
-- each type: its name and its packed counters}.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when one of KEYS 1-6, 8, 9 has the
-- wrong Redis type (it writes nothing either way; the scrape leaves that queue out).
local err = qc_check_types(KEYS, {"list", "zset", "zset", "zset", "zset", "zset"})
    or qc_check_type(KEYS[8], "hash") or qc_check_type(KEYS[9], "hash")
if err then return err end
local out = {redis.call("LLEN", KEYS[1])}
for i = 2, 6 do
    out[i] = redis.call("ZCARD", KEYS[i])
end
out[7] = redis.call("EXISTS", KEYS[7])
local oldest = redis.call("LINDEX", KEYS[1], -1)
local since, msg = "", ""
if oldest then
    local row = redis.pcall("HMGET", ARGV[1] .. oldest, "pending_since", "msg")
    if row["err"] == nil then
        since, msg = row[1] or "", row[2] or ""
    end
else
    oldest = ""
end
out[8], out[9], out[10] = oldest, since, msg
local memory = -1
local sample = tonumber(ARGV[2])
local offset = tonumber(ARGV[3] or "0") or 0
if sample > 0 then
    local total, tasks = 0, 0
    for i = 1, 9 do
        if i ~= 7 then
            local m = redis.pcall("MEMORY", "USAGE", KEYS[i], "SAMPLES", "5")
            if type(m) == "table" then total = -1 break end
            total = total + (m or 0)
        end
    end
    if total >= 0 then
        for i = 1, 6 do tasks = tasks + out[i] end
        memory = total
        for i = 1, 6 do
            local count = out[i]
            if count > 0 then
                local k = math.min(count, math.max(1, math.floor(sample * count / tasks + 0.5)))
                local sum, n = 0, 0
                for j = 0, k - 1 do
                    local position = math.min(count - 1, math.floor((j + offset) * count / k))
                    local id
                    if i == 1 then
                        id = redis.call("LINDEX", KEYS[1], position)
                    else
                        id = redis.call("ZRANGE", KEYS[i], position, position)[1]
                    end
                    if id then
                        -- every field (SAMPLES 0): a task HASH has few, and one over 64 bytes (its message)
                        -- makes it a hashtable, which the default 5 samples under-measured by about a quarter
                        local m = redis.pcall("MEMORY", "USAGE", ARGV[1] .. id, "SAMPLES", "0")
                        if type(m) == "number" then sum, n = sum + m, n + 1 end
                    end
                end
                if n > 0 then memory = memory + math.floor(sum / n * count) end
            end
        end
    end
end
out[11] = memory
local counts = redis.call("HMGET", KEYS[8], "processed", "failed")
-- as stored (Python reads them): tonumber() of a hand-edited value is nil, a hole in the reply
out[12], out[13] = counts[1] or "0", counts[2] or "0"
for _, v in ipairs(redis.call("HGETALL", KEYS[9])) do
    out[#out + 1] = v
end
return out
