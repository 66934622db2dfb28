-- forward: move due tasks of a scheduled or retry ZSET to pending.
--
-- KEYS[1] <prefix>:{<q>}:scheduled or <prefix>:{<q>}:retry   ZSET id -> due (unix ms)
-- KEYS[2] <prefix>:{<q>}:pending                             LIST
-- ARGV[1] now, unix ms
-- ARGV[2] at most this many tasks
-- ARGV[3] wake target (qc_publish: "[S]PUBLISH <prefix>:{<q>}:wake")
-- ARGV[4] task-key prefix, <prefix>:{<q>}:t:
-- Cluster note: each moved task's HASH (<prefix>:{<q>}:t:<id>) is built from ARGV[4] (same {<q>}
-- tag as KEYS), same slot.
-- An id whose HASH is gone (deleted, evicted) is dropped from KEYS[1], never given a half hash.
-- An id whose task key holds another Redis type (foreign or corrupt data) is dropped from KEYS[1]
-- and its key left untouched, so one bad key never holds back the due tasks behind it.
-- Returns {taken, next due}: the number of ids taken off KEYS[1] (moved, or dropped when their hash
-- was gone or foreign), and the due time (unix ms) of the earliest task left in KEYS[1], -1 when none
-- (the forwarder sleeps until then, so a task due before its next round is not left waiting).
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when one of KEYS has the wrong
-- Redis type; checked before any write, so nothing is written.
local task_prefix = ARGV[4]
-- wrong-type guard, before any write
local err = qc_check_types(KEYS, {"zset", "list"}) if err then return err end
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[2]))
local movable, foreign = {}, {}
for _, id in ipairs(ids) do
    if qc_check_type(qc_task_key(task_prefix, id), "hash") then
        foreign[#foreign + 1] = id
    else
        movable[#movable + 1] = id
    end
end
qc_move_to_pending(task_prefix, movable, KEYS[1], KEYS[2], ARGV[1], ARGV[3])
qc_zrem_ids(KEYS[1], foreign)
local first = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
return {#ids, first[2] and math.floor(tonumber(first[2])) or -1}
