-- periodic_fire: claim one fire time of a periodic entry and enqueue its task, atomically; or skip
-- missed fire times (advance the mark without a task). Every worker calls it for every fire it
-- sees due: the first call claims, the others find the mark past the fire and do nothing, so a
-- fire is enqueued once however many workers run. The task id derives from (entry, fire time), so
-- even a mark lost with its hash cannot store a second task for one fire.
--
-- KEYS[1] <prefix>:{<q>}:periodic:<name>          HASH  the entry (periodic_sync.lua)
-- KEYS[2] <prefix>:{<q>}:periodic:<name>:fires    LIST  recent fires, newest first
-- KEYS[3] <prefix>:{<q>}:pending                  LIST
-- KEYS[4] <prefix>:{<q>}:t:<id>                   HASH  the fire's task
-- ARGV[1] now, unix ms
-- ARGV[2] the fire time claimed, unix ms (the time in the task id)
-- ARGV[3] the new mark, unix ms: fire times up to it count as done (>= ARGV[2]; ignored for "manual")
-- ARGV[4] kind: "schedule" (on time), "late" (a missed fire run once late), "skip" (missed fires
--         skipped: no task), "manual" (an operator's run: the mark is neither checked nor moved)
-- ARGV[5] task id ("-" for "skip")
-- ARGV[6] encoded task message (JSON; "" for "skip")
-- ARGV[7] wake target (qc_publish: "[S]PUBLISH <prefix>:{<q>}:wake"), published when pending
--         turns non-empty
-- ARGV[8] 1 to put the task at the head of pending (priority > 0), else 0
-- ARGV[9] the entry's next fire time after this one, unix ms
-- ARGV[10] how many recent fires the fires LIST keeps
-- ARGV[11] how many fire times this claim stands for ("late", "skip": the run of missed fire times
--          from ARGV[2] to ARGV[3]; else 1; absent: 1)
-- Counts in KEYS[1], per outcome, "fires_<kind>", in fire times (schedule, manual: enqueued on time or
-- by an operator; late: missed fire times run once late; skip: missed fire times skipped; paused: fire
-- times a pause skipped), for the metrics.
-- Returns {code, mark}: 1 enqueued, 2 skipped, 0 already claimed (the mark is at or past the fire,
-- or its task id exists), -1 no such entry (not declared, or forgotten), -2 paused (the mark moves:
-- a paused entry's fires are skipped, not kept for later).
-- Error reply "QCWRONGTYPE ..." when a key has the wrong type; checked before any write.
local err = qc_check_types(KEYS, {"hash", "list", "list", "hash"})
if err then return err end
if redis.call("EXISTS", KEYS[1]) == 0 then
    return {-1, 0}
end
local now, fire, kind = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local fires = (kind == "late" or kind == "skip") and math.max(1, math.floor(tonumber(ARGV[11] or "1") or 1)) or 1
local mark = tonumber(redis.call("HGET", KEYS[1], "mark") or "0")
local function record(id)
    redis.call("LPUSH", KEYS[2], ARGV[2] .. " " .. now .. " " .. kind .. " " .. id)
    redis.call("LTRIM", KEYS[2], 0, tonumber(ARGV[10]) - 1)
end
if kind ~= "manual" then
    if fire <= mark then
        return {0, mark}
    end
    mark = math.max(mark, tonumber(ARGV[3]))
    if redis.call("HEXISTS", KEYS[1], "paused") == 1 then
        redis.call("HSET", KEYS[1], "mark", mark, "next", ARGV[9])
        redis.call("HINCRBY", KEYS[1], "fires_paused", fires)
        return {-2, mark}
    end
    redis.call("HSET", KEYS[1], "mark", mark, "next", ARGV[9])
    if kind == "skip" then
        record("-")
        redis.call("HINCRBY", KEYS[1], "fires_skip", fires)
        return {2, mark}
    end
end
if redis.call("EXISTS", KEYS[4]) == 1 then
    return {0, mark}
end
redis.call("HSET", KEYS[4], "msg", ARGV[6], "state", "pending")
local pushed
if ARGV[8] == "1" then
    pushed = redis.call("RPUSH", KEYS[3], ARGV[5])
else
    pushed = redis.call("LPUSH", KEYS[3], ARGV[5])
end
if pushed == 1 then
    qc_publish(ARGV[7], "1")
end
redis.call("HSET", KEYS[1], "last_fire", ARGV[2], "last_id", ARGV[5], "last_kind", kind, "last_at", now)
redis.call("HINCRBY", KEYS[1], "fires_" .. kind, fires)
record(ARGV[5])
return {1, mark}
