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
