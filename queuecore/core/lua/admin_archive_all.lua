-- admin_archive_all: archive up to N tasks of the pending LIST or a scheduled/retry ZSET.
--
-- KEYS[1] <prefix>:{<q>}:pending LIST, or <prefix>:{<q>}:scheduled|retry ZSET
-- KEYS[2] <prefix>:{<q>}:archived  ZSET
-- ARGV[1] at most this many ids looked at
-- ARGV[2] now, unix ms
-- ARGV[3] "list" when KEYS[1] is the pending LIST, else "zset"
-- ARGV[4] task-key prefix, <prefix>:{<q>}:t:
-- ARGV[5] wake-key prefix, <prefix>:{<q>}:done: (the wake LIST of a watched task: results.py)
-- ARGV[6] wake token TTL, ms
-- Cluster note: each moved task's HASH is built from ARGV[4], and its wake LIST from ARGV[5] (same
-- {<q>} tag as KEYS), same slot.
-- Each task is marked archived_by "operator" (the worker's own archive clears the mark).
-- An id whose HASH is gone (deleted, evicted) is dropped from KEYS[1], never given a half hash.
-- A call is a bulk job's chunk (bulkjobs.py):
-- ARGV[7] since, unix ms: only tasks that were in the state then are acted on (_lib.lua qc_bulk_ids);
--         the others are passed and left where they are
-- ARGV[8] the state's name (pending, scheduled or retry)
-- ARGV[9] cursor score ("" = from the start), ARGV[10] cursor id,
-- ARGV[11] cursor count (_lib.lua qc_bulk_ids)
-- ARGV[12] at most this many tasks acted on (or dropped); ARGV[1] is how many ids are looked at
-- Returns {acted on, dropped (hash gone), cursor score, cursor id, cursor count, 1 when the state
-- has no more of the job's tasks else 0}.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
local is_list, task_prefix = ARGV[3] == "list", ARGV[4]
-- wrong-type guard, before any write: the KEYS, then the task hashes of the ids this call takes
local err = qc_check_types(KEYS, {is_list and "list" or "zset", "zset"}) if err then return err end
local ids, cursor, ends, right = qc_bulk_chunk(KEYS[1], is_list, task_prefix, tonumber(ARGV[1]), ARGV, 7)
err = qc_check_task_hashes(task_prefix, ids) if err then return err end
qc_bulk_remove(KEYS[1], is_list, ids, right)
local dropped = 0
for _, id in ipairs(ids) do
    local key = qc_task_key(task_prefix, id)
    if redis.call("EXISTS", key) == 1 then
        redis.call("HSET", key, "state", "archived", "archived_by", "operator")
        redis.call("ZADD", KEYS[2], ARGV[2], id)
        qc_wake_if_watched(key, qc_done_key(ARGV[5], id), ARGV[6])
    else
        dropped = dropped + 1
    end
end
return {#ids - dropped, dropped, cursor[1], cursor[2], cursor[3], ends and 1 or 0}
