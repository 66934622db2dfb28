-- admin_archive_all: archive up to N tasks of the pending LIST or a scheduled/retry ZSET.
--
-- KEYS[1] <prefix>:{<q>}:pending LIST, or <prefix>:{<q>}:scheduled|retry ZSET
-- KEYS[2] <prefix>:{<q>}:archived  ZSET
-- ARGV[1] at most this many tasks
-- ARGV[2] now, unix ms
-- ARGV[3] "list" when KEYS[1] is the pending LIST, else "zset"
-- Cluster note: each moved task's HASH is built from KEYS[2], same slot.
-- An id whose HASH is gone (deleted, evicted) is dropped from KEYS[1], never given a half hash.
-- Returns the number of ids taken off KEYS[1] (archived, or dropped); call again until it returns 0.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- Wrong-type guard: refuse before writing anything (a Lua error midway is not rolled back).
local function wrong(key, want)
    local t = redis.call("TYPE", key)["ok"]
    if t ~= "none" and t ~= want then
        return redis.error_reply("QCWRONGTYPE " .. key .. " holds a " .. t .. ", expected a " .. want)
    end
end
do
    local bad = wrong(KEYS[1], ARGV[3] == "list" and "list" or "zset") or wrong(KEYS[2], "zset")
    if bad then
        return bad
    end
    local task_prefix = string.sub(KEYS[2], 1, -9) .. "t:"
    local n = tonumber(ARGV[1])
    local ids = {}
    if n > 0 then
        if ARGV[3] == "list" then
            ids = redis.call("LRANGE", KEYS[1], -n, -1)
        else
            ids = redis.call("ZRANGE", KEYS[1], 0, n - 1)
        end
    end
    for _, id in ipairs(ids) do  -- the task hashes this call will write
        bad = wrong(task_prefix .. id, "hash")
        if bad then
            return bad
        end
    end
end
local n = tonumber(ARGV[1])
local task_prefix = string.sub(KEYS[2], 1, -9) .. "t:"
local ids
if ARGV[3] == "list" then
    ids = {}
    for _ = 1, n do
        local id = redis.call("RPOP", KEYS[1])
        if not id then
            break
        end
        ids[#ids + 1] = id
    end
else
    ids = redis.call("ZRANGE", KEYS[1], 0, n - 1)
    if #ids > 0 then
        redis.call("ZREM", KEYS[1], unpack(ids))
    end
end
for _, id in ipairs(ids) do
    if redis.call("EXISTS", task_prefix .. id) == 1 then
        redis.call("HSET", task_prefix .. id, "state", "archived")
        redis.call("ZADD", KEYS[2], ARGV[2], id)
    end
end
return #ids
