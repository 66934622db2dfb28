-- limit_wake: tasks a limit held back may run now (a slot was freed): move each that still waits
-- in scheduled (its "waiting" field set by park) to the head of pending, to run next.
--
-- KEYS[1] <prefix>:{<q>}:scheduled  ZSET
-- KEYS[2] <prefix>:{<q>}:pending    LIST
-- ARGV[1] now, unix ms
-- ARGV[2] wake target (qc_publish: "[S]PUBLISH <prefix>:{<q>}:wake")
-- ARGV[3] task-key prefix, <prefix>:{<q>}:t:
-- ARGV[4..] task ids
-- Cluster note: each task HASH (<prefix>:{<q>}:t:<id>) is built from ARGV[3] (same {<q>} tag as
-- KEYS, so the same slot).
-- Returns how many will take their slot soon: those moved, and those already pending or running (run
-- meanwhile by the forwarder: their backstop came first). Any other id (deleted, or not held back by a
-- limit: snoozed) is left alone and not counted, so the caller hands its slot to the next in line.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key has the wrong Redis
-- type; checked before any write, so nothing is written.
local err = qc_check_types(KEYS, {"zset", "list"}) if err then return err end
local task_prefix = ARGV[3]
local moved, coming = 0, 0
local was_empty = redis.call("LLEN", KEYS[2]) == 0
for i = 4, #ARGV do
    local id = ARGV[i]
    local key = qc_task_key(task_prefix, id)
    if not qc_check_type(key, "hash") then
        local fields = redis.call("HMGET", key, "state", "waiting")
        if fields[1] == "scheduled" and fields[2] and fields[2] ~= "" and redis.call("ZSCORE", KEYS[1], id) then
            redis.call("ZREM", KEYS[1], id)
            redis.call("HSET", key, "state", "pending", "pending_since", ARGV[1])
            redis.call("HDEL", key, "waiting")
            redis.call("RPUSH", KEYS[2], id)
            moved = moved + 1
        elseif fields[1] == "pending" or fields[1] == "active" then
            coming = coming + 1
        end
    end
end
if moved > 0 and was_empty then
    qc_publish(ARGV[2], "1")
end
return moved + coming
