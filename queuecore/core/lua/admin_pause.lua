-- admin_pause: pause a queue, for good or until a time (it then resumes by itself).
--
-- KEYS[1] <prefix>:{<q>}:paused   STRING  "<until, unix ms>", or "1" without an end
-- ARGV[1] until, unix ms (0 = until unpaused)
-- Returns 1. The key expires at ARGV[1] (PEXPIREAT): dequeue sees no key, and the queue runs again.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when the key is no STRING.
local err = qc_check_types(KEYS, {"string"}) if err then return err end
if ARGV[1] == "0" then
    redis.call("SET", KEYS[1], "1")
else
    redis.call("SET", KEYS[1], ARGV[1], "PXAT", ARGV[1])
end
return 1
