-- dequeue: move up to N pending tasks to active, each under a new lease.
--
-- KEYS[1] <prefix>:{<q>}:pending   LIST
-- KEYS[2] <prefix>:{<q>}:active    ZSET  id -> lease expiry (unix ms)
-- KEYS[3] <prefix>:{<q>}:paused    STRING
-- ARGV[1] now, unix ms
-- ARGV[2] lease expiry, unix ms
-- ARGV[3] at most this many tasks
-- Cluster note: the task HASH of each popped id (<prefix>:{<q>}:t:<id>) is built here from KEYS[1]
-- (same {<q>} tag, so the same slot); its id is not known before the pop.
-- Returns a flat array id1, msg1, lease1, retried1, id2, ... ; msg is "" and lease 0 for an id whose
-- hash is gone.
-- Returns an empty array when the queue is paused or empty.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- Wrong-type guard: refuse before writing anything (a Lua error midway is not rolled back).
for i, want in ipairs({"list", "zset"}) do
    local t = redis.call("TYPE", KEYS[i])["ok"]
    if t ~= "none" and t ~= want then
        return redis.error_reply("QCWRONGTYPE " .. KEYS[i] .. " holds a " .. t .. ", expected a " .. want)
    end
end
do  -- and the task hashes this call will write, derived from the ids it will take
    local task_prefix = string.sub(KEYS[1], 1, -8) .. "t:"
    for _, id in ipairs((tonumber(ARGV[3]) > 0 and redis.call("LRANGE", KEYS[1], -tonumber(ARGV[3]), -1) or {})) do
        local t = redis.call("TYPE", task_prefix .. id)["ok"]
        if t ~= "none" and t ~= "hash" then
            return redis.error_reply("QCWRONGTYPE " .. task_prefix .. id .. " holds a " .. t .. ", expected a hash")
        end
    end
end
if redis.call("EXISTS", KEYS[3]) == 1 then
    return {}
end
local task_prefix = string.sub(KEYS[1], 1, -8) .. "t:"
local out = {}
for _ = 1, tonumber(ARGV[3]) do
    local id = redis.call("RPOP", KEYS[1])
    if not id then
        break
    end
    local key = task_prefix .. id
    local fields = redis.call("HMGET", key, "msg", "retried", "lease")
    local msg = fields[1]
    if msg then
        local lease = tonumber(fields[3] or "0") + 1  -- never reset: each dequeue gets a new number
        redis.call("HSET", key, "state", "active", "started_at", ARGV[1], "lease", lease)
        redis.call("ZADD", KEYS[2], ARGV[2], id)
        out[#out + 1] = id
        out[#out + 1] = msg
        out[#out + 1] = lease
        out[#out + 1] = fields[2] or "0"
    else
        out[#out + 1] = id
        out[#out + 1] = ""
        out[#out + 1] = 0
        out[#out + 1] = 0
    end
end
return out
