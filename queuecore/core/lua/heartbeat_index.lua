-- heartbeat_index: keep one worker process in the index of live processes; drop expired entries.
--
-- KEYS[1] <prefix>:servers   ZSET  server id -> when its heartbeat expires (unix ms)
-- ARGV[1] server id
-- ARGV[2] when its heartbeat expires, unix ms
-- ARGV[3] now, unix ms: entries that expired by then are removed
-- Returns 1.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when KEYS[1] has the wrong
-- Redis type; checked before any write, so nothing is written.
--
-- Works at maxmemory (see heartbeat.lua): the removal of expired entries comes first, a write that
-- never grows memory, so Redis lets the ZADD (which replaces this process's own entry) through.
local err = qc_check_types(KEYS, {"zset"}) if err then return err end
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", ARGV[3])
redis.call("ZADD", KEYS[1], ARGV[2], ARGV[1])
return 1
