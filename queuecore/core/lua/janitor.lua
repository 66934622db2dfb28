-- janitor: delete completed tasks past their retention, and archived tasks past the age limit or
-- beyond the size limit (the oldest first: an operator's archive, which does not trim, can pass it).
--
-- KEYS[1] <prefix>:{<q>}:completed  ZSET id -> expiry (unix ms)
-- KEYS[2] <prefix>:{<q>}:archived   ZSET id -> archived at (unix ms)
-- ARGV[1] now, unix ms
-- ARGV[2] archived tasks from before this unix ms are deleted
-- ARGV[3] at most this many tasks of each kind
-- ARGV[4] task-key prefix, <prefix>:{<q>}:t:
-- ARGV[5] at most this many archived tasks are kept
-- ARGV[6] the queue's key start, <prefix>:{<q>}: (a deleted task's unique lock is released only when
--         it starts so: the same slot)
-- Cluster note: each deleted task's HASH (<prefix>:{<q>}:t:<id>) is built from ARGV[4] (same {<q>}
-- tag as KEYS), same slot; so is the unique lock it names, when it starts with ARGV[6].
-- Returns {completed tasks deleted, archived deleted for their age, archived deleted beyond the size}.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- wrong-type guard, before any write
local err = qc_check_types(KEYS, {"zset", "zset"}) if err then return err end
local task_prefix = ARGV[4]
local n, aged, over_size = 0, 0, 0
local expired = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[3]))
for _, id in ipairs(expired) do
    qc_release_own_lock(qc_task_key(task_prefix, id), ARGV[6], id)
    redis.call("DEL", qc_task_key(task_prefix, id))
    redis.call("ZREM", KEYS[1], id)
    n = n + 1
end
local old = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", "(" .. ARGV[2], "LIMIT", 0, tonumber(ARGV[3]))
for _, id in ipairs(old) do
    qc_release_own_lock(qc_task_key(task_prefix, id), ARGV[6], id)
    redis.call("DEL", qc_task_key(task_prefix, id))
    redis.call("ZREM", KEYS[2], id)
    aged = aged + 1
end
local over = math.min(redis.call("ZCARD", KEYS[2]) - tonumber(ARGV[5]), tonumber(ARGV[3]))
if over > 0 then
    for _, id in ipairs(redis.call("ZRANGE", KEYS[2], 0, over - 1)) do
        qc_release_own_lock(qc_task_key(task_prefix, id), ARGV[6], id)
    redis.call("DEL", qc_task_key(task_prefix, id))
        redis.call("ZREM", KEYS[2], id)
        over_size = over_size + 1
    end
end
return {n, aged, over_size}
