-- periodic_sync: a worker declares one periodic entry it runs (scheduler.py) and reads its state.
-- Writes the entry's definition, when it was declared and its next fire; an entry seen for the
-- first time gets its mark (fire times up to it are claimed or skipped) at now, so a new entry
-- never fires for times before it was first declared.
--
-- KEYS[1] <prefix>:{<q>}:periodic:<name>   HASH  the entry (keys.py QueueKeys.periodic)
-- ARGV[1] now, unix ms
-- ARGV[2] the entry's definition (JSON, periodic.py PeriodicEntry.definition)
-- ARGV[3] its next fire time as this worker computes it, unix ms
-- Returns {mark (unix ms), paused (1 or 0)}.
-- Error reply "QCWRONGTYPE ..." when KEYS[1] is not a hash; nothing is written.
local err = qc_check_type(KEYS[1], "hash")
if err then return err end
redis.call("HSET", KEYS[1], "def", ARGV[2], "declared", ARGV[1], "next", ARGV[3])
redis.call("HSETNX", KEYS[1], "mark", ARGV[1])
local state = redis.call("HMGET", KEYS[1], "mark", "paused")
return {tonumber(state[1]), state[2] and 1 or 0}
