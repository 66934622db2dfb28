-- enqueue: store a new task and make it pending, or scheduled when it has a due time.
--
-- KEYS[1] <prefix>:{<q>}:t:<id>          task HASH
-- KEYS[2] <prefix>:{<q>}:pending         LIST  (or <prefix>:{<q>}:scheduled ZSET when ARGV[3] > 0)
-- KEYS[3] <prefix>:{<q>}:unique:<t>:<d>  STRING uniqueness lock (only when ARGV[4] > 0)
-- ARGV[1] task id
-- ARGV[2] encoded message (JSON)
-- ARGV[3] process at, unix ms; 0 = pending now
-- ARGV[4] uniqueness TTL, ms; 0 = not unique
-- ARGV[5] now, unix ms
-- ARGV[6] wake channel, published when the pending list turns non-empty
-- Returns 1 enqueued, 0 the id already exists, -1 a unique lock is held (value: holder id in reply[2]).
if redis.call("EXISTS", KEYS[1]) == 1 then
    return 0
end
local unique_ttl = tonumber(ARGV[4])
if unique_ttl > 0 then
    if not redis.call("SET", KEYS[3], ARGV[1], "NX", "PX", unique_ttl) then
        return {-1, redis.call("GET", KEYS[3])}
    end
end
local process_at = tonumber(ARGV[3])
if process_at > 0 then
    if unique_ttl > 0 then
        redis.call("HSET", KEYS[1], "msg", ARGV[2], "state", "scheduled", "unique", KEYS[3])
    else
        redis.call("HSET", KEYS[1], "msg", ARGV[2], "state", "scheduled")
    end
    redis.call("ZADD", KEYS[2], process_at, ARGV[1])
    return 1
end
if unique_ttl > 0 then
    redis.call("HSET", KEYS[1], "msg", ARGV[2], "state", "pending", "pending_since", ARGV[5], "unique", KEYS[3])
else
    redis.call("HSET", KEYS[1], "msg", ARGV[2], "state", "pending", "pending_since", ARGV[5])
end
if redis.call("LPUSH", KEYS[2], ARGV[1]) == 1 then
    redis.call("PUBLISH", ARGV[6], "1")
end
return 1
