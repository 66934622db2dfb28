-- admin_delete_all: delete up to N tasks of a state (not active), releasing their unique locks.
--
-- KEYS[1] <prefix>:{<q>}:pending LIST, or <prefix>:{<q>}:scheduled|retry|archived|completed ZSET
-- ARGV[1] at most this many tasks
-- ARGV[2] "list" when KEYS[1] is the pending LIST, else "zset"
-- Cluster note: each task's HASH, and the unique lock named in its "unique" field, are built
-- from KEYS[1] and checked to carry the same "<prefix>:{<q>}:" start, so they share its slot.
-- Returns the number deleted; call again until it returns 0.
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
    local bad = wrong(KEYS[1], ARGV[2] == "list" and "list" or "zset")
    if bad then
        return bad
    end
    local task_prefix = string.match(KEYS[1], "^(.*}:)[a-z]+$") .. "t:"
    local n = tonumber(ARGV[1])
    local ids = {}
    if n > 0 then
        if ARGV[2] == "list" then
            ids = redis.call("LRANGE", KEYS[1], -n, -1)
        else
            ids = redis.call("ZRANGE", KEYS[1], 0, n - 1)
        end
    end
    for _, id in ipairs(ids) do  -- the task hashes (and their unique locks) this call reads and deletes
        local key = task_prefix .. id
        bad = wrong(key, "hash")
        local lock = not bad and redis.call("HGET", key, "unique")
        bad = bad or (lock and wrong(lock, "string"))
        if bad then
            return bad
        end
    end
end
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
