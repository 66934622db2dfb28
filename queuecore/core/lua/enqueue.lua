-- enqueue: store new tasks of one queue, each pending, or scheduled when it has a due time.
-- Takes a batch, so a client enqueues many tasks in one round-trip.
--
-- KEYS[1]    <prefix>:{<q>}:pending         LIST
-- KEYS[2]    <prefix>:{<q>}:scheduled       ZSET  id -> due (unix ms)
-- KEYS[3]    <prefix>:{<q>}:active          ZSET  id -> lease expiry (unix ms)
-- KEYS[4]    <prefix>:{<q>}:paused          STRING
-- KEYS[5]    <prefix>:{<q>}:idle            ZSET  "<lease ms>[+] <worker id>" -> listing lapses (unix ms)
-- KEYS[6..]  <prefix>:{<q>}:t:<id>          task HASH of each task, in ARGV order; then the
--            <prefix>:{<q>}:unique:<t>:<d>  STRING uniqueness locks that ARGV points at
-- ARGV[1] now, unix ms
-- ARGV[2] wake target (qc_publish: "[S]PUBLISH <prefix>:{<q>}:wake"): "1" is published when the pending
--         list turns non-empty, "due <ms>" when a task scheduled here falls due before every task
--         scheduled before it (the forwarders then wake for it, not at their next round)
-- ARGV[3] n, the number of tasks
-- ARGV[4] push target ("[S]PUBLISH <prefix>:{<q>}:push:", to which a worker id is appended; "" = never
--         push): when the queue is empty and not paused, the task that would be taken first goes
--         straight to a worker listed in KEYS[5], under a lease on Redis's clock, published on its
--         push channel as "<id> <lease> <message>" to a worker listed with "<lease ms>+" (the lease's
--         number is Redis's time in ms: no earlier holder of the id had it), else as "<id> <message>"
--         under lease 1 (a worker of an earlier version); a worker no longer subscribed (no one got the message)
--         is taken off the list and the next is tried (at most 3), else the task is pending as usual;
--         a message over PUSH_MAX_BYTES (1 MB) is never pushed (a message past Redis's pub/sub
--         output-buffer limit cuts the subscriber off after PUBLISH counted it received: the task
--         was leased to a worker that never got it), it waits in pending for a fetch
-- ARGV[5 + 6(i-1) ...] for task i: id, encoded message (JSON), process at (unix ms; 0 = pending now),
--         uniqueness TTL in ms, index into KEYS of its unique lock (0 = not unique), and its flags, the
--         sum of: 1 when the id was chosen by the caller (an existing task with it is a conflict,
--         unless it holds this very message; without it the id was generated, and an existing task
--         with it was stored by an earlier send of the same call: the retry of a call whose reply was
--         lost stores nothing twice), 2 when it goes to the head of pending (the end workers take
--         from, so it runs before the tasks already waiting: the priority option); "0" to "3"
-- Returns one reply per task: 1 enqueued, 2 enqueued and leased to a waiting worker (pushed; for an
-- earlier send's task: it is active), 0 the id already exists, {-1, holder id} a unique lock is held.
-- Error reply "QCINVALID <where> <field> <value>" (qc_invalid) when the batch is malformed: n not
-- matching ARGV ("batch count"), an empty id or message, a due time or TTL that is not a whole
-- number of ms below 10^15, a lock index not pointing at a lock key with a TTL, flags not "0" to
-- "3" ("item <i> <field>"): every item is checked before any write, so nothing is written.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
--
-- Cost: per task one HSET; the pending ids go in one LPUSH per batch (one RPUSH for those at the
-- head), and the task hashes are looked up with one EXISTS for the whole batch (TYPE each only when
-- some exist); a batch with scheduled tasks reads the first of KEYS[2] once; one LLEN per batch, and
-- when the queue is empty its pause and KEYS[5] (with TIME) once. Every check comes before the first write.
local n = tonumber(ARGV[3])
do  -- the batch is well formed, item by item, before anything is written
    if not n or n < 1 or n ~= math.floor(n) or #ARGV ~= 4 + 6 * n or #KEYS < 5 + n then
        return qc_invalid("batch", "count", ARGV[3])
    end
    local function ms(text)  -- a whole number of ms that every Redis command takes (no sign, no exponent)
        return type(text) == "string" and #text <= 15 and string.match(text, "^%d+$") ~= nil
    end
    for i = 1, n do
        local base = 5 + 6 * (i - 1)
        local unique = ARGV[base + 4]
        local field
        if ARGV[base] == "" then
            field = "id"
        elseif ARGV[base + 1] == "" then
            field = "message"
        elseif not ms(ARGV[base + 2]) then
            field = "process_at_ms"
        elseif not ms(ARGV[base + 3]) then
            field = "unique_ttl_ms"
        elseif not ms(unique) or (tonumber(unique) > 0 and (tonumber(unique) < 6 + n or tonumber(unique) > #KEYS
                or tonumber(ARGV[base + 3]) < 1)) then
            field = "lock_index"
        elseif not string.match(ARGV[base + 5], "^[0-3]$") then
            field = "flags"
        end
        if field then
            return qc_invalid("item " .. i, field, field == "message" and "" or ARGV[base + ({id = 0, process_at_ms = 2,
                unique_ttl_ms = 3, lock_index = 4, flags = 5})[field]])
        end
    end
end
local scheduled = false
for i = 1, n do
    scheduled = scheduled or tonumber(ARGV[5 + 6 * (i - 1) + 2]) > 0
end
local err = qc_check_type(KEYS[1], "list") or (scheduled and qc_check_type(KEYS[2], "zset"))
if err then return err end
local found = 0
do
    for first = 6, 5 + n, 1000 do
        found = found + redis.call("EXISTS", unpack(KEYS, first, math.min(first + 999, 5 + n)))
    end
    if found > 0 then
        for i = 6, 5 + n do
            err = qc_check_type(KEYS[i], "hash") if err then return err end
        end
    end
    for i = 6 + n, #KEYS do  -- uniqueness locks
        err = qc_check_type(KEYS[i], "string") if err then return err end
    end
end
-- A task may go straight to a waiting worker only in an empty, running queue (none waiting is passed over).
local may_push = ARGV[4] ~= "" and redis.call("LLEN", KEYS[1]) == 0 and redis.call("EXISTS", KEYS[4]) == 0
if may_push then
    err = qc_check_type(KEYS[3], "zset") or qc_check_type(KEYS[5], "zset")
    if err then return err end
end
local out, push, head = {}, {}, {}
local earliest, soonest, soonest_text = nil, nil, nil  -- the due time first in KEYS[2] before; the batch's first
if scheduled then
    local first = redis.call("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
    earliest = first[2] and tonumber(first[2])
end
local ready = {}  -- id -> its item, for the tasks that go to pending now
for i = 1, n do
    local base = 5 + 6 * (i - 1)
    local id, msg = ARGV[base], ARGV[base + 1]
    local key = KEYS[5 + i]
    local unique = tonumber(ARGV[base + 4])
    local flags = tonumber(ARGV[base + 5])
    local chosen = flags % 2 == 1
    if (found > 0 or chosen) and redis.call("EXISTS", key) == 1 then
        -- A generated id (128 random bits) that exists was stored by an earlier send of this same
        -- call (a client retry after a lost reply): done. So was a caller-chosen id whose task holds
        -- this very message (its enqueued_at, to the ms, included). Any other taken id: a conflict.
        -- Stored: 2 when it is active (that send pushed it to a worker, or a worker took it since).
        local stored = redis.call("HMGET", key, "msg", "state")
        if chosen and stored[1] ~= msg then
            out[i] = 0
        else
            out[i] = stored[2] == "active" and 2 or 1
        end
    elseif unique > 0 and not redis.call("SET", KEYS[unique], id, "NX", "PX", ARGV[base + 3]) then
        out[i] = {-1, redis.call("GET", KEYS[unique])}
    else
        local process_at = tonumber(ARGV[base + 2])
        if process_at > 0 then
            redis.call("HSET", key, "msg", msg, "state", "scheduled")
            redis.call("ZADD", KEYS[2], process_at, id)
            if not soonest or process_at < soonest then
                soonest, soonest_text = process_at, ARGV[base + 2]
            end
        else
            redis.call("HSET", key, "msg", msg, "state", "pending")  -- pending since enqueued_at (in msg)
            ready[id] = i
            if flags >= 2 then
                head[#head + 1] = id
            else
                push[#push + 1] = id
            end
        end
        if unique > 0 then
            redis.call("HSET", key, "unique", KEYS[unique])
        end
        out[i] = 1
    end
end
for j = 1, math.floor(#head / 2) do  -- pushed last to first: the batch's first is taken first
    head[j], head[#head + 1 - j] = head[#head + 1 - j], head[j]
end
local taken_first = head[#head] or push[1]  -- what a worker would take first (head: pushed last to first)
local PUSH_MAX_BYTES = 1048576
if may_push and taken_first and #ARGV[5 + 6 * (ready[taken_first] - 1) + 1] <= PUSH_MAX_BYTES then
    local i = ready[taken_first]
    local now = redis.call("TIME")
    now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    redis.call("ZREMRANGEBYSCORE", KEYS[5], "-inf", now)  -- listings that lapsed
    for _, member in ipairs(redis.call("ZRANGE", KEYS[5], 0, 2)) do
        redis.call("ZREM", KEYS[5], member)  -- taken: a worker lists itself again once it waits again
        local space = string.find(member, " ", 1, true)
        local lease_text = space and string.sub(member, 1, space - 1) or ""
        -- "<ms>+": the worker takes the lease's number with the push (now, unique to this task's
        -- incarnation); a bare "<ms>" (a worker of an earlier version) takes lease 1 and no number
        local numbered = string.sub(lease_text, -1) == "+"
        local lease_ms = tonumber(numbered and string.sub(lease_text, 1, -2) or lease_text)
        local lease = numbered and string.format("%.0f", now) or "1"
        local head_text = numbered and (taken_first .. " " .. lease) or taken_first
        if lease_ms and qc_publish(ARGV[4] .. string.sub(member, space + 1),
                head_text .. " " .. ARGV[5 + 6 * (i - 1) + 1]) > 0 then
            redis.call("ZADD", KEYS[3], now + lease_ms, taken_first)
            redis.call("HSET", KEYS[5 + i], "state", "active", "started_at", now, "lease", lease)
            out[i] = 2
            if head[#head] == taken_first then
                head[#head] = nil
            else
                table.remove(push, 1)
            end
            break
        end
    end
end
local woke = false
for command, ids in pairs({LPUSH = push, RPUSH = head}) do
    for first = 1, #ids, 1000 do
        local last = math.min(first + 999, #ids)
        if redis.call(command, KEYS[1], unpack(ids, first, last)) == last - first + 1 then
            woke = true  -- the list was empty: tell idle workers
        end
    end
end
if woke then
    qc_publish(ARGV[2], "1")
end
if soonest and (not earliest or soonest < earliest) then
    qc_publish(ARGV[2], "due " .. soonest_text)
end
return out
