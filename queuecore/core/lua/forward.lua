-- forward: move due tasks of a scheduled or retry ZSET to pending.
--
-- KEYS[1] <prefix>:{<q>}:scheduled or <prefix>:{<q>}:retry   ZSET id -> due (unix ms)
-- KEYS[2] <prefix>:{<q>}:pending                             LIST
-- ARGV[1] now, unix ms
-- ARGV[2] at most this many tasks
-- ARGV[3] wake channel
-- Cluster note: each moved task's HASH (<prefix>:{<q>}:t:<id>) is built from KEYS[2], same slot.
-- An id whose HASH is gone (deleted, evicted) is dropped from KEYS[1], never given a half hash.
-- Returns the number of ids taken off KEYS[1] (moved, or dropped when their hash was gone).
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- Wrong-type guard: refuse before writing anything (a Lua error midway is not rolled back).
for i, want in ipairs({"zset", "list"}) do
    local t = redis.call("TYPE", KEYS[i])["ok"]
    if t ~= "none" and t ~= want then
        return redis.error_reply("QCWRONGTYPE " .. KEYS[i] .. " holds a " .. t .. ", expected a " .. want)
    end
end
do  -- and the task hashes this call will write, derived from the ids it will take
    local task_prefix = string.sub(KEYS[2], 1, -8) .. "t:"
    for _, id in ipairs(redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[2]))) do
        local t = redis.call("TYPE", task_prefix .. id)["ok"]
        if t ~= "none" and t ~= "hash" then
            return redis.error_reply("QCWRONGTYPE " .. task_prefix .. id .. " holds a " .. t .. ", expected a hash")
        end
    end
end
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[2]))
if #ids == 0 then
    return 0
end
local task_prefix = string.sub(KEYS[2], 1, -8) .. "t:"
local was_empty = redis.call("LLEN", KEYS[2]) == 0
for _, id in ipairs(ids) do
    if redis.call("EXISTS", task_prefix .. id) == 1 then
        redis.call("HSET", task_prefix .. id, "state", "pending", "pending_since", ARGV[1])
        redis.call("LPUSH", KEYS[2], id)
    end
    redis.call("ZREM", KEYS[1], id)
end
if was_empty and redis.call("LLEN", KEYS[2]) > 0 then
    redis.call("PUBLISH", ARGV[3], "1")
end
return #ids
