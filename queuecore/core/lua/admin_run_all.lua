-- admin_run_all: move up to N tasks of a scheduled, retry or archived ZSET to pending.
--
-- KEYS[1] <prefix>:{<q>}:scheduled|retry|archived  ZSET
-- KEYS[2] <prefix>:{<q>}:pending                   LIST
-- ARGV[1] at most this many tasks
-- ARGV[2] now, unix ms
-- ARGV[3] wake channel
-- Cluster note: each moved task's HASH is built from KEYS[2], same slot.
-- An id whose HASH is gone (deleted, evicted) is dropped from KEYS[1], never given a half hash.
-- Returns the number of ids taken off KEYS[1] (moved, or dropped); call again until it returns 0.
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
    for _, id in ipairs(redis.call("ZRANGE", KEYS[1], 0, tonumber(ARGV[1]) - 1)) do
        local t = redis.call("TYPE", task_prefix .. id)["ok"]
        if t ~= "none" and t ~= "hash" then
            return redis.error_reply("QCWRONGTYPE " .. task_prefix .. id .. " holds a " .. t .. ", expected a hash")
        end
    end
end
local ids = redis.call("ZRANGE", KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #ids == 0 then
    return 0
end
local task_prefix = string.sub(KEYS[2], 1, -8) .. "t:"
local was_empty = redis.call("LLEN", KEYS[2]) == 0
for _, id in ipairs(ids) do
    if redis.call("EXISTS", task_prefix .. id) == 1 then
        redis.call("HSET", task_prefix .. id, "state", "pending", "pending_since", ARGV[2])
        redis.call("LPUSH", KEYS[2], id)
    end
end
redis.call("ZREM", KEYS[1], unpack(ids))
if was_empty and redis.call("LLEN", KEYS[2]) > 0 then
    redis.call("PUBLISH", ARGV[3], "1")
end
return #ids
