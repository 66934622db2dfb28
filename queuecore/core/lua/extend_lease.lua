-- extend_lease: renew the leases a worker holds in one queue, and report lost or cancelled ones.
--
-- KEYS[1]    <prefix>:{<q>}:active        ZSET
-- KEYS[2..n] <prefix>:{<q>}:t:<id>        task HASH of each held task, in ARGV order
-- ARGV[1]    new lease expiry, unix ms
-- ARGV[2k], ARGV[2k+1]  task id and lease number of the k-th task (k = 1..n-1)
-- Returns one code per task: 1 renewed, 2 renewed but cancel requested, 0 lease lost (not renewed).
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
do  -- wrong-type guard, before any write
    local wanted = {"zset"}
    for i = 2, #KEYS do
        wanted[i] = "hash"
    end
    local err = qc_check_types(KEYS, wanted) if err then return err end
end
-- At maxmemory Redis refuses a script's first write when that command may grow memory (ZADD) but
-- lets a script that already wrote go on. Renewals must work while Redis is full (they grow nothing),
-- so begin with a write that never grows memory: removing an id that cannot exist ("" is no task id).
redis.call("ZREM", KEYS[1], "")
local out = {}
for i = 2, #KEYS do
    local id = ARGV[2 * (i - 1)]
    local lease = ARGV[2 * (i - 1) + 1]
    local state = redis.call("HMGET", KEYS[i], "state", "lease", "cancel")
    if state[1] == "active" and state[2] == lease then
        redis.call("ZADD", KEYS[1], "XX", ARGV[1], id)
        if state[3] then
            out[#out + 1] = 2
        else
            out[#out + 1] = 1
        end
    else
        out[#out + 1] = 0
    end
end
return out
