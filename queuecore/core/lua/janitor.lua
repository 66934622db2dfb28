-- janitor: delete completed tasks past their retention and archived tasks past the age limit.
--
-- KEYS[1] <prefix>:{<q>}:completed  ZSET id -> expiry (unix ms)
-- KEYS[2] <prefix>:{<q>}:archived   ZSET id -> archived at (unix ms)
-- ARGV[1] now, unix ms
-- ARGV[2] archived tasks from before this unix ms are deleted
-- ARGV[3] at most this many tasks of each kind
-- Cluster note: each deleted task's HASH (<prefix>:{<q>}:t:<id>) is built from KEYS[1], same slot.
-- Returns the number of tasks deleted.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- Wrong-type guard: refuse before writing anything (a Lua error midway is not rolled back).
for i, want in ipairs({"zset", "zset"}) do
    local t = redis.call("TYPE", KEYS[i])["ok"]
    if t ~= "none" and t ~= want then
        return redis.error_reply("QCWRONGTYPE " .. KEYS[i] .. " holds a " .. t .. ", expected a " .. want)
    end
end
local task_prefix = string.sub(KEYS[1], 1, -10) .. "t:"
local n = 0
local expired = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[3]))
for _, id in ipairs(expired) do
    redis.call("DEL", task_prefix .. id)
    redis.call("ZREM", KEYS[1], id)
    n = n + 1
end
local old = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", "(" .. ARGV[2], "LIMIT", 0, tonumber(ARGV[3]))
for _, id in ipairs(old) do
    redis.call("DEL", task_prefix .. id)
    redis.call("ZREM", KEYS[2], id)
    n = n + 1
end
return n
