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
