-- admin_run_all: move up to N tasks of a scheduled, retry or archived ZSET to pending.
--
-- KEYS[1] <prefix>:{<q>}:scheduled|retry|archived  ZSET
-- KEYS[2] <prefix>:{<q>}:pending                   LIST
-- ARGV[1] at most this many tasks
-- ARGV[2] now, unix ms
-- ARGV[3] wake target (qc_publish: "[S]PUBLISH <prefix>:{<q>}:wake")
-- ARGV[4] task-key prefix, <prefix>:{<q>}:t:
-- Cluster note: each moved task's HASH is built from ARGV[4] (same {<q>} tag as KEYS), same slot.
-- An id whose HASH is gone (deleted, evicted) is dropped from KEYS[1], never given a half hash.
-- Returns the number of ids taken off KEYS[1] (moved, or dropped); call again until it returns 0.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
local task_prefix = ARGV[4]
-- wrong-type guard, before any write: the KEYS, then the task hashes of the ids this call takes
local err = qc_check_types(KEYS, {"zset", "list"}) if err then return err end
local ids = redis.call("ZRANGE", KEYS[1], 0, tonumber(ARGV[1]) - 1)
err = qc_check_task_hashes(task_prefix, ids) if err then return err end
return qc_move_to_pending(task_prefix, ids, KEYS[1], KEYS[2], ARGV[2], ARGV[3])
