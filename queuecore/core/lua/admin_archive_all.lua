-- admin_archive_all: archive up to N tasks of the pending LIST or a scheduled/retry ZSET.
--
-- KEYS[1] <prefix>:{<q>}:pending LIST, or <prefix>:{<q>}:scheduled|retry ZSET
-- KEYS[2] <prefix>:{<q>}:archived  ZSET
-- ARGV[1] at most this many tasks
-- ARGV[2] now, unix ms
-- ARGV[3] "list" when KEYS[1] is the pending LIST, else "zset"
-- ARGV[4] task-key prefix, <prefix>:{<q>}:t:
-- ARGV[5] wake-key prefix, <prefix>:{<q>}:done: (the wake LIST of a watched task: results.py)
-- ARGV[6] wake token TTL, ms
-- Cluster note: each moved task's HASH is built from ARGV[4], and its wake LIST from ARGV[5] (same
-- {<q>} tag as KEYS), same slot.
-- Each task is marked archived_by "operator" (the worker's own archive clears the mark).
-- An id whose HASH is gone (deleted, evicted) is dropped from KEYS[1], never given a half hash.
-- Returns the number of ids taken off KEYS[1] (archived, or dropped); call again until it returns 0.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
local is_list, task_prefix = ARGV[3] == "list", ARGV[4]
-- wrong-type guard, before any write: the KEYS, then the task hashes of the ids this call takes
local err = qc_check_types(KEYS, {is_list and "list" or "zset", "zset"}) if err then return err end
local ids = qc_peek_ids(KEYS[1], is_list, tonumber(ARGV[1]))
err = qc_check_task_hashes(task_prefix, ids) if err then return err end
qc_remove_ids(KEYS[1], is_list, ids)
for _, id in ipairs(ids) do
    local key = qc_task_key(task_prefix, id)
    if redis.call("EXISTS", key) == 1 then
        redis.call("HSET", key, "state", "archived", "archived_by", "operator")
        redis.call("ZADD", KEYS[2], ARGV[2], id)
        qc_wake_if_watched(key, qc_done_key(ARGV[5], id), ARGV[6])
    end
end
return #ids
