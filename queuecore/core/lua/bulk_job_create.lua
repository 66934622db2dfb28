-- bulk_job_create: record a new bulk job, queued, unless as many as allowed are open already.
--
-- KEYS[1] <prefix>:{/}:bulk:<id>     HASH  the job (bulkjobs.py reads its fields)
-- KEYS[2] <prefix>:{/}:bulk:open     ZSET  ids of the queued and running jobs, scored by creation (unix ms)
-- KEYS[3] <prefix>:{/}:bulk          ZSET  ids of the recent jobs, scored by creation (unix ms)
-- ARGV[1] job id
-- ARGV[2] now, unix ms (the job's creation)
-- ARGV[3] at most this many jobs open at once
-- ARGV[4] the recent-jobs index keeps this many ids (older ids are dropped; their records expire)
-- ARGV[5] job-key prefix, <prefix>:{/}:bulk: (an id appended names a job's HASH, as KEYS[1])
-- ARGV[6 ..] field, value pairs of the job
-- Returns 1 when created, 0 when ARGV[3] jobs are open already (nothing written but the index's trim,
-- and the removal from KEYS[2] of ids whose record is gone: they never end, and would hold places).
-- Error reply "QCWRONGTYPE ..." when a key has the wrong type; checked before any write.
-- Cluster note: the job keys read through ARGV[5] share KEYS[1]'s hash tag {/}.
--
-- Works at maxmemory, where a bulk delete is how an operator makes room: the index's trim comes
-- first, a write that never grows memory, so Redis lets the writes after it through.
local err = qc_check_types(KEYS, {"hash", "zset", "zset"}) if err then return err end
redis.call("ZREMRANGEBYRANK", KEYS[3], 0, -tonumber(ARGV[4]) - 1)
if redis.call("ZCARD", KEYS[2]) >= tonumber(ARGV[3]) then
    -- an open id whose record is gone (deleted by hand, evicted) or is no job's holds no place: it
    -- could never end (the first 1,000 are looked at: the set holds ARGV[3] ids unless tampered with)
    for _, id in ipairs(redis.call("ZRANGE", KEYS[2], 0, 999)) do
        local job = ARGV[5] .. id
        if qc_check_type(job, "hash") or redis.call("HEXISTS", job, "action") == 0 then
            redis.call("ZREM", KEYS[2], id)
        end
    end
    if redis.call("ZCARD", KEYS[2]) >= tonumber(ARGV[3]) then
        return 0
    end
end
local pairs_ = {}
for i = 6, #ARGV do
    pairs_[#pairs_ + 1] = ARGV[i]
end
redis.call("HSET", KEYS[1], unpack(pairs_))
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[1])
redis.call("ZADD", KEYS[3], ARGV[2], ARGV[1])
return 1
