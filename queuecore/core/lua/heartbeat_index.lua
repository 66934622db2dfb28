-- heartbeat_index: keep one worker process in the index of live processes; drop expired entries;
-- and list the queues it serves among the known queues again (after a Redis restart that lost the
-- data, the dashboard and adminctl list them again at the next heartbeat, not at the next enqueue).
--
-- KEYS[1] <prefix>:servers   ZSET  server id -> when its heartbeat expires (unix ms)
-- KEYS[2] <prefix>:queues    SET   the known queue names (same slot: the global hash tag)
-- ARGV[1] server id
-- ARGV[2] when its heartbeat expires, unix ms
-- ARGV[3] now, unix ms: entries that expired by then are removed
-- ARGV[4 ..] the queues the process serves
-- Returns 1.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when KEYS[1] has the wrong
-- Redis type; checked before any write, so nothing is written.
--
-- Works at maxmemory (see heartbeat.lua): the removal of expired entries comes first, a write that
-- never grows memory, so Redis lets the ZADD (which replaces this process's own entry) through.
local err = qc_check_types(KEYS, {"zset", "set"}) if err then return err end
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", ARGV[3])
redis.call("ZADD", KEYS[1], ARGV[2], ARGV[1])
for i = 4, #ARGV, 1000 do
    redis.call("SADD", KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
return 1
