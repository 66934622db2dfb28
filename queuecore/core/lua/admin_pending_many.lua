-- admin_pending_many: an operator archives or deletes many pending tasks of one queue in one call
-- (a bulk job's chunk: bulkjobs.py), taking them off the pending LIST in one pass near where they
-- were found, instead of one LREM each (an LREM walks the list: 13 ms a task on a million).
--
-- KEYS[1] <prefix>:{<q>}:pending   LIST  ids, pushed on the left, taken from the right
-- KEYS[2] <prefix>:{<q>}:archived  ZSET
-- ARGV[1] "archive" or "delete"
-- ARGV[2] now, unix ms
-- ARGV[3] task-key prefix, <prefix>:{<q>}:t:
-- ARGV[4] wake-key prefix, <prefix>:{<q>}:done: (the wake LIST of a watched task: results.py)
-- ARGV[5] wake token TTL, ms
-- ARGV[6] the queue's key start, <prefix>:{<q>}: (a task's unique lock is deleted only when it starts so)
-- ARGV[7] how many places on each side of the hints to look (workers take tasks meanwhile)
-- ARGV[8 ..] pairs: a task id, and its place when it was found, counted from the right end (0: the
--            next to run), less what this job has taken off the list since
-- Cluster note: each task's HASH is built from ARGV[3], its wake LIST from ARGV[4], and its unique
-- lock is only touched when it starts with ARGV[6]: all in the same {<q>} slot as KEYS.
-- The tasks are taken off the list in one LRANGE of the places between the hints (moved by as much
-- as the first of them moved, found with LPOS from the right, and widened by ARGV[7]): the first
-- found with LREM from the right, the others overwritten with a marker that one
-- LREM from the right then removes; a task not found there (moved further) is removed by its own LREM.
-- Archived tasks are marked archived_by "operator" (as admin_archive_task does); deleted tasks lose
-- their unique lock (as admin_delete_task does); a watched task's waiters are woken.
-- Returns one code per task, in order: 1 done, -1 no such task, -2 not pending (left as it is).
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
--
-- Works at maxmemory (deleting is how an operator makes room): the first write is an LREM, which
-- never grows memory, so Redis lets the writes after it through.
local archive = ARGV[1] == "archive"
local task_prefix, done_prefix, ttl, base = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local slack = tonumber(ARGV[7])
local err = qc_check_types(KEYS, {"list", "zset"}) if err then return err end
local ids, hints = {}, {}
for i = 8, #ARGV, 2 do
    ids[#ids + 1] = ARGV[i]
    hints[#hints + 1] = tonumber(ARGV[i + 1])
end
err = qc_check_task_hashes(task_prefix, ids) if err then return err end
if not archive then  -- the unique locks this call may delete (GET must not fail midway)
    for _, id in ipairs(ids) do
        local lock = qc_own_lock(qc_task_key(task_prefix, id), base)
        err = lock and qc_check_type(lock, "string") if err then return err end
    end
end
local codes, wanted, lo, hi = {}, {}, nil, nil
for i, id in ipairs(ids) do
    local state = redis.call("HGET", qc_task_key(task_prefix, id), "state")
    if not state then
        codes[i] = -1
    elseif state ~= "pending" then
        codes[i] = -2
    else
        codes[i] = 1
        wanted[id] = true
        lo = math.min(lo or hints[i], hints[i])
        hi = math.max(hi or hints[i], hints[i])
    end
end
if not lo then
    return codes
end
-- Where they are now: the list moved since they were found (workers took tasks off the right end,
-- priority tasks joined it). The first of them still on the list, looked up from the right (LPOS,
-- which walks only as far as it is), says by how much.
local len = redis.call("LLEN", KEYS[1])
local tries = 0
for i, id in ipairs(ids) do
    if codes[i] == 1 then
        local at = redis.call("LPOS", KEYS[1], id, "RANK", -1)
        if at then
            local drift = (len - 1 - at) - hints[i]
            lo, hi = lo + drift, hi + drift
            break
        end
        tries = tries + 1
        if tries == 3 then
            break
        end
    end
end
-- Off the list: the places lo-slack .. hi+slack from the right, read once.
local left_lo, left_hi = math.max(0, len - 1 - (hi + slack)), len - 1 - math.max(0, lo - slack)
local marker, marked, first = "\0qc-taken", 0, nil
if left_lo <= left_hi then
    local items = redis.call("LRANGE", KEYS[1], left_lo, left_hi)
    for k = #items, 1, -1 do  -- from the right: an LREM of the first leaves the places left of it as they are
        local id = items[k]
        if wanted[id] then
            wanted[id] = nil
            if not first then
                first = id
                redis.call("LREM", KEYS[1], -1, id)
            else
                redis.call("LSET", KEYS[1], left_lo + k - 1, marker)
                marked = marked + 1
            end
        end
    end
end
if marked > 0 then
    redis.call("LREM", KEYS[1], -marked, marker)
end
for id in pairs(wanted) do  -- not where it was looked for: on its own
    redis.call("LREM", KEYS[1], -1, id)
end
for i, id in ipairs(ids) do
    if codes[i] == 1 then
        local key = qc_task_key(task_prefix, id)
        if archive then
            redis.call("HSET", key, "state", "archived", "archived_by", "operator")
            redis.call("ZADD", KEYS[2], ARGV[2], id)
            qc_wake_if_watched(key, qc_done_key(done_prefix, id), ttl)
        else
            local unique = qc_own_lock(key, base)
            if unique and redis.call("GET", unique) == id then
                redis.call("DEL", unique)
            end
            qc_wake_if_watched(key, qc_done_key(done_prefix, id), ttl)
            redis.call("DEL", key)
        end
    end
end
return codes
