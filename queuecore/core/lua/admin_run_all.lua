-- admin_run_all: move up to N tasks of a scheduled, retry or archived ZSET to pending.
--
-- KEYS[1] <prefix>:{<q>}:scheduled|retry|archived  ZSET
-- KEYS[2] <prefix>:{<q>}:pending                   LIST
-- ARGV[1] at most this many ids looked at
-- ARGV[2] now, unix ms
-- ARGV[3] wake target (qc_publish: "[S]PUBLISH <prefix>:{<q>}:wake")
-- ARGV[4] task-key prefix, <prefix>:{<q>}:t:
-- Cluster note: each moved task's HASH is built from ARGV[4] (same {<q>} tag as KEYS), same slot.
-- An id whose HASH is gone (deleted, evicted) is dropped from KEYS[1], never given a half hash.
-- A call is a bulk job's chunk (bulkjobs.py):
-- ARGV[5] since, unix ms: only tasks that were in the state then are acted on (_lib.lua qc_bulk_ids);
--         the others are passed and left where they are
-- ARGV[6] the state's name (scheduled, retry or archived)
-- ARGV[7] cursor score ("" = from the start), ARGV[8] cursor id,
-- ARGV[9] cursor count (_lib.lua qc_bulk_ids)
-- ARGV[10] at most this many tasks acted on (or dropped); ARGV[1] is how many ids are looked at
-- Returns {acted on, dropped (hash gone), cursor score, cursor id, cursor count, 1 when the state
-- has no more of the job's tasks else 0}.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
local task_prefix = ARGV[4]
-- wrong-type guard, before any write: the KEYS, then the task hashes of the ids this call takes
local err = qc_check_types(KEYS, {"zset", "list"}) if err then return err end
local ids, cursor, ends = qc_bulk_chunk(KEYS[1], false, task_prefix, tonumber(ARGV[1]), ARGV, 5)
err = qc_check_task_hashes(task_prefix, ids) if err then return err end
local moved = qc_move_to_pending(task_prefix, ids, KEYS[1], KEYS[2], ARGV[2], ARGV[3])
return {moved, #ids - moved, cursor[1], cursor[2], cursor[3], ends and 1 or 0}
