-- admin_delete_all: delete up to N tasks of a state (not active), releasing their unique locks.
--
-- KEYS[1] <prefix>:{<q>}:pending LIST, or <prefix>:{<q>}:scheduled|retry|archived|completed ZSET
-- ARGV[1] at most this many ids looked at
-- ARGV[2] "list" when KEYS[1] is the pending LIST, else "zset"
-- ARGV[3] task-key prefix, <prefix>:{<q>}:t:
-- ARGV[4] the queue's key start, <prefix>:{<q>}:
-- ARGV[5] wake-key prefix, <prefix>:{<q>}:done: (the wake LIST of a watched task: results.py)
-- ARGV[6] wake token TTL, ms
-- Cluster note: each task's HASH is built from ARGV[3], its wake LIST from ARGV[5], and the unique
-- lock named in its "unique" field is only deleted when it starts with ARGV[4]: all carry the same
-- {<q>} tag as KEYS[1], so they share its slot.
-- A call is a bulk job's chunk (bulkjobs.py):
-- ARGV[7] since, unix ms: only tasks that were in the state then are acted on (_lib.lua qc_bulk_ids);
--         the others are passed and left where they are
-- ARGV[8] the state's name (pending, scheduled, retry, archived or completed)
-- ARGV[9] cursor score ("" = from the start), ARGV[10] cursor id,
-- ARGV[11] cursor count (_lib.lua qc_bulk_ids)
-- ARGV[12] at most this many tasks acted on (or dropped); ARGV[1] is how many ids are looked at
-- Returns {acted on, dropped (hash gone), cursor score, cursor id, cursor count, 1 when the state
-- has no more of the job's tasks else 0}.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
local is_list, task_prefix, base = ARGV[2] == "list", ARGV[3], ARGV[4]
-- wrong-type guard, before any write: KEYS[1], then the task hashes (and their unique locks) of the
-- ids this call takes
local err = qc_check_type(KEYS[1], is_list and "list" or "zset") if err then return err end
local ids, cursor, ends, right = qc_bulk_chunk(KEYS[1], is_list, task_prefix, tonumber(ARGV[1]), ARGV, 7)
for _, id in ipairs(ids) do
    local key = qc_task_key(task_prefix, id)
    err = qc_check_type(key, "hash") if err then return err end
    local lock = qc_own_lock(key, base)
    err = lock and qc_check_type(lock, "string") if err then return err end
end
qc_bulk_remove(KEYS[1], is_list, ids, right)
local dropped = 0
for _, id in ipairs(ids) do
    local key = qc_task_key(task_prefix, id)
    if redis.call("EXISTS", key) == 0 then
        dropped = dropped + 1
    end
    local unique = qc_own_lock(key, base)
    if unique and redis.call("GET", unique) == id then
        redis.call("DEL", unique)
    end
    qc_wake_if_watched(key, qc_done_key(ARGV[5], id), ARGV[6])
    redis.call("DEL", key)
end
return {#ids - dropped, dropped, cursor[1], cursor[2], cursor[3], ends and 1 or 0}
