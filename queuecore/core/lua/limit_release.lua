-- limit_release: tasks of a limited type ended; free their slots and hand each free slot to the
-- task that waited longest.
--
-- KEYS[1] <prefix>:{lim:<type>}:running[:<key>]  ZSET  "<queue> <id> <lease>" -> slot expiry (unix ms)
-- KEYS[2] <prefix>:{lim:<type>}:waiting[:<key>]  ZSET  "<queue> <id>" -> since (unix ms)
-- ARGV[1] now, unix ms
-- ARGV[2] concurrency limit
-- ARGV[3] the most waiting members to take (0: one per free slot)
-- ARGV[4..] slots, "<queue> <id> <lease>" (limit_acquire's ARGV[8])
-- Returns the members taken off the waiting list, oldest first (one per free slot, at most ARGV[3]):
-- the caller wakes them (limit_wake, in their queue's slot), and takes more for those it could not
-- wake (deleted meanwhile): the slots they were handed are still free.
-- Error reply "QCWRONGTYPE ..." when a key has the wrong Redis type; checked before any write.
local err = qc_check_types(KEYS, {"zset", "zset"}) if err then return err end
for i = 4, #ARGV do
    redis.call("ZREM", KEYS[1], ARGV[i])
end
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", ARGV[1])
local free = tonumber(ARGV[2]) - redis.call("ZCARD", KEYS[1])
local most = tonumber(ARGV[3])
if most > 0 and most < free then
    free = most
end
if free <= 0 then
    return {}
end
local popped = redis.call("ZPOPMIN", KEYS[2], free)
local out = {}
for i = 1, #popped, 2 do
    out[#out + 1] = popped[i]
end
return out
