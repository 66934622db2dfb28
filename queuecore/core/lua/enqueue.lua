-- enqueue: store new tasks of one queue, each pending, or scheduled when it has a due time.
-- Takes a batch, so a client enqueues many tasks in one round-trip.
--
-- KEYS[1]    <prefix>:{<q>}:pending         LIST
-- KEYS[2]    <prefix>:{<q>}:scheduled       ZSET  id -> due (unix ms)
-- KEYS[3..]  <prefix>:{<q>}:t:<id>          task HASH of each task, in ARGV order; then the
--            <prefix>:{<q>}:unique:<t>:<d>  STRING uniqueness locks that ARGV points at
-- ARGV[1] now, unix ms
-- ARGV[2] wake channel, published when the pending list turns non-empty
-- ARGV[3] n, the number of tasks
-- ARGV[4 + 6(i-1) ...] for task i: id, encoded message (JSON), process at (unix ms; 0 = pending now),
--         uniqueness TTL in ms, index into KEYS of its unique lock (0 = not unique), and 1 to check
--         that the id is new (a caller-chosen id) or 0 to skip the check (a generated random id)
-- Returns one reply per task: 1 enqueued, 0 the id already exists, {-1, holder id} a unique lock is held.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- Wrong-type guard: refuse before writing anything (a Lua error midway is not rolled back).
local function wrong(key, want)
    local t = redis.call("TYPE", key)["ok"]
    if t ~= "none" and t ~= want then
        return redis.error_reply("QCWRONGTYPE " .. key .. " holds a " .. t .. ", expected a " .. want)
    end
end
local bad = wrong(KEYS[1], "list") or wrong(KEYS[2], "zset")
if bad then
    return bad
end
do  -- task hashes: one EXISTS for the whole batch; TYPE each only when some exist
    local ntasks = tonumber(ARGV[3])
    local found = 0
    for first = 3, 2 + ntasks, 1000 do
        found = found + redis.call("EXISTS", unpack(KEYS, first, math.min(first + 999, 2 + ntasks)))
    end
    for i = 3, found > 0 and 2 + ntasks or 2 do
        bad = wrong(KEYS[i], "hash")
        if bad then
            return bad
        end
    end
    for i = 3 + ntasks, #KEYS do  -- uniqueness locks
        bad = wrong(KEYS[i], "string")
        if bad then
            return bad
        end
    end
end
local n = tonumber(ARGV[3])
local out = {}
local woke = false
for i = 1, n do
    local base = 4 + 6 * (i - 1)
    local id, msg = ARGV[base], ARGV[base + 1]
    local key = KEYS[2 + i]
    local unique = tonumber(ARGV[base + 4])
    local holder = nil
    if ARGV[base + 5] == "1" and redis.call("EXISTS", key) == 1 then
        out[i] = 0
    elseif unique > 0 and not redis.call("SET", KEYS[unique], id, "NX", "PX", tonumber(ARGV[base + 3])) then
        out[i] = {-1, redis.call("GET", KEYS[unique])}
    else
        local process_at = tonumber(ARGV[base + 2])
        if process_at > 0 then
            redis.call("HSET", key, "msg", msg, "state", "scheduled")
            redis.call("ZADD", KEYS[2], process_at, id)
        else
            redis.call("HSET", key, "msg", msg, "state", "pending", "pending_since", ARGV[1])
            if redis.call("LPUSH", KEYS[1], id) == 1 then
                woke = true
            end
        end
        if unique > 0 then
            redis.call("HSET", key, "unique", KEYS[unique])
        end
        out[i] = 1
    end
end
if woke then
    redis.call("PUBLISH", ARGV[2], "1")
end
return out
