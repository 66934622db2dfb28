-- dequeue: move up to N pending tasks to active, each under a new lease.
--
-- KEYS[1] <prefix>:{<q>}:pending   LIST
-- KEYS[2] <prefix>:{<q>}:active    ZSET  id -> lease expiry (unix ms)
-- KEYS[3] <prefix>:{<q>}:paused    STRING
-- KEYS[4] <prefix>:{<q>}:idle      ZSET  "<lease ms>+ <worker id>" -> listing lapses (unix ms)
-- ARGV[1] now, unix ms
-- ARGV[2] lease expiry, unix ms
-- ARGV[3] at most this many tasks
-- ARGV[4] task-key prefix, <prefix>:{<q>}:t:
-- ARGV[5] this worker's entry in KEYS[4] ("" = none; given by a worker with no handler running): listed
--         until ARGV[6] when the queue is empty (the worker waits; an enqueue into the empty queue may
--         lease a task straight to it, enqueue.lua), taken off when the queue gives it a task
-- ARGV[6] when the entry lapses, unix ms
-- Cluster note: the task HASH of each popped id (<prefix>:{<q>}:t:<id>) is built here from ARGV[4]
-- (same {<q>} tag as KEYS, so the same slot); its id is not known before the pop.
-- Returns a flat array id1, msg1, lease1, retried1, id2, ... ; msg is "" and lease 0 for an id whose
-- hash is gone; then one more element, "more", when the call stopped early with tasks left pending: it
-- takes no task after the one whose message brings what it read to 4 MB (a message may be as long as
-- the clients' max_payload_bytes: 180 of 500 KB in one call held Redis 0.29 s).
-- Returns an empty array when the queue is paused or empty.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- At maxmemory the first write (ZADD, which grows memory) is refused with Redis's own "OOM ..."
-- error reply, passed on unchanged: nothing is written and the tasks stay pending.
--
-- Cost: every batch-level step is one command for the whole batch (LRANGE, one ZADD, one LTRIM, and
-- with ARGV[5] a TYPE and a ZADD or a ZREM of KEYS[4]); per task one HMGET and one HSET. All reads
-- come first; a read of a wrong-type key fails (pcall), and the first write (the ZADD) writes nothing
-- when it fails, so a refusal leaves no trace.
if redis.call("EXISTS", KEYS[3]) == 1 then
    return {}
end
local n = tonumber(ARGV[3])
if n <= 0 then
    return {}
end
local ids = redis.pcall("LRANGE", KEYS[1], -n, -1)
if ids["err"] then
    return qc_refuse(KEYS[1], "list")
end
local k = #ids
local listing = ARGV[5] ~= ""
if listing then
    local err = qc_check_type(KEYS[4], "zset") if err then return err end
end
if k == 0 then
    if listing then  -- Redis full (OOM): the worker is not listed and fetches as before
        redis.pcall("ZADD", KEYS[4], ARGV[6], ARGV[5])
    end
    return {}
end
local task_prefix = ARGV[4]
-- Reads: the oldest task is the rightmost, so walk the peeked slice from its end.
local out, zadd, live, seen = {}, {}, {}, {}
local taken, read = 0, 0  -- ids taken off the right end, bytes of messages read
for i = k, 1, -1 do
    if qc_read_enough(read) then
        break
    end
    taken = taken + 1
    local id = ids[i]
    if not seen[id] then  -- an id listed twice (never written so by these scripts) runs once
        seen[id] = true
        local key = qc_task_key(task_prefix, id)
        local fields = redis.pcall("HMGET", key, "msg", "retried", "lease")
        if fields["err"] then
            return qc_refuse(key, "hash")
        end
        local msg = fields[1]
        if msg then
            read = read + #msg
            -- A number no earlier holder of this id had, even of a task deleted and enqueued again
            -- under the same id (its hash, and the count in it, start afresh): the time of this
            -- dequeue (ms), or one more than the last number when that is later.
            local lease = math.max(tonumber(fields[3] or "0") + 1, tonumber(ARGV[1]))
            zadd[#zadd + 1] = ARGV[2]
            zadd[#zadd + 1] = id
            live[#live + 1] = id
            live[#live + 1] = lease
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
end
-- Writes.
for first = 1, #zadd, 2000 do  -- the first ZADD fails before writing anything if the key is no zset
    local added = redis.pcall("ZADD", KEYS[2], unpack(zadd, first, math.min(first + 1999, #zadd)))
    if type(added) == "table" and added["err"] then  -- wrong type, or Redis full (OOM)
        return qc_pcall_refusal(added, KEYS[2], "zset")
    end
end
redis.call("LTRIM", KEYS[1], 0, -(taken + 1))
for i = 1, #live, 2 do
    redis.call("HSET", qc_task_key(task_prefix, live[i]), "state", "active", "started_at", ARGV[1],
        "lease", live[i + 1])
end
if listing then  -- it has work now: not waiting
    redis.call("ZREM", KEYS[4], ARGV[5])
end
if taken < k then
    out[#out + 1] = "more"
end
return out
