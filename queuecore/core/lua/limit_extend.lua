-- limit_extend: renew the concurrency slots this worker holds (as the task leases are renewed).
--
-- KEYS[1] <prefix>:{lim:<type>}:running[:<key>]  ZSET  "<queue> <id> <lease>" -> slot expiry (unix ms)
-- ARGV[1] new expiry, unix ms
-- ARGV[2..] slots, "<queue> <id> <lease>" (limit_acquire's ARGV[8])
-- Returns how many were renewed (a slot already expired and dropped is not taken again: XX).
-- Error reply "QCWRONGTYPE ..." when the key is no ZSET; checked before any write.
local err = qc_check_types(KEYS, {"zset"}) if err then return err end
local renewed = 0
for i = 2, #ARGV do
    renewed = renewed + redis.call("ZADD", KEYS[1], "XX", "CH", ARGV[1], ARGV[i])
end
return renewed
