-- requeue: hand an unfinished task back to the front of pending (graceful shutdown); not a failure.
--
-- KEYS[1] <prefix>:{<q>}:t:<id>   task HASH
-- KEYS[2] <prefix>:{<q>}:active   ZSET
-- KEYS[3] <prefix>:{<q>}:pending  LIST
-- ARGV[1] task id
-- ARGV[2] lease number (fencing token)
-- ARGV[3] now, unix ms
-- ARGV[4] wake target (qc_publish: "[S]PUBLISH <prefix>:{<q>}:wake")
-- Returns 1 requeued, 0 the lease was lost.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when a key (or a task hash or
-- lock it would touch) has the wrong Redis type; checked before any write, so nothing is written.
-- wrong-type guard, before any write
local err = qc_check_types(KEYS, {"hash", "zset", "list"}) if err then return err end
if not qc_holds_lease(KEYS[1], ARGV[2]) then
    return 0
end
redis.call("ZREM", KEYS[2], ARGV[1])
redis.call("HSET", KEYS[1], "state", "pending", "pending_since", ARGV[3])
redis.call("HDEL", KEYS[1], "started_at")
if redis.call("RPUSH", KEYS[3], ARGV[1]) == 1 then
    qc_publish(ARGV[4], "1")
end
return 1
