-- forward: move due tasks of a scheduled or retry ZSET to pending.
--
-- KEYS[1] <prefix>:{<q>}:scheduled or <prefix>:{<q>}:retry   ZSET id -> due (unix ms)
-- KEYS[2] <prefix>:{<q>}:pending                             LIST
-- ARGV[1] now, unix ms
-- ARGV[2] at most this many tasks
-- ARGV[3] wake channel
-- ARGV[4] task-key prefix, <prefix>:{<q>}:t:
-- Cluster note: each moved task's HASH (<prefix>:{<q>}:t:<id>) is built from ARGV[4] (same {<q>}
-- tag as KEYS), same slot.
-- An id whose HASH is gone (deleted, evicted) is dropped from KEYS[1], never given a half hash.
-- Returns the number of ids taken off KEYS[1] (moved, or dropped when their hash was gone).
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
local task_prefix = ARGV[4]
-- wrong-type guard, before any write: the KEYS, then the task hashes of the ids this call takes
local err = qc_check_types(KEYS, {"zset", "list"}) if err then return err end
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[2]))
err = qc_check_task_hashes(task_prefix, ids) if err then return err end
return qc_move_to_pending(task_prefix, ids, KEYS[1], KEYS[2], ARGV[1], ARGV[3])
