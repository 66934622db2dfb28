-- admin_delete_all: delete up to N tasks of a state (not active), releasing their unique locks.
--
-- KEYS[1] <prefix>:{<q>}:pending LIST, or <prefix>:{<q>}:scheduled|retry|archived|completed ZSET
-- ARGV[1] at most this many tasks
-- ARGV[2] "list" when KEYS[1] is the pending LIST, else "zset"
-- Cluster note: each task's HASH, and the unique lock named in its "unique" field, are built
-- from KEYS[1] and checked to carry the same "<prefix>:{<q>}:" start, so they share its slot.
-- Returns the number deleted; call again until it returns 0.
local n = tonumber(ARGV[1])
local base = string.match(KEYS[1], "^(.*}:)[a-z]+$")
local task_prefix = base .. "t:"
local ids
if ARGV[2] == "list" then
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
    local key = task_prefix .. id
    local unique = redis.call("HGET", key, "unique")
    if unique and string.sub(unique, 1, #base) == base and redis.call("GET", unique) == id then
        redis.call("DEL", unique)
    end
    redis.call("DEL", key)
end
return #ids
