-- admin_periodic_pause: an operator pauses or resumes a periodic entry. While paused, its fires are
-- skipped (the mark moves past them): resuming does not run the fires of the pause.
--
-- KEYS[1] <prefix>:{<q>}:periodic:<name>   HASH
-- ARGV[1] "1" pause, "0" resume
-- ARGV[2] who (the operator, for display)
-- ARGV[3] now, unix ms
-- Returns 1 changed, 0 already so, -1 no such entry.
-- Error reply "QCWRONGTYPE ..." when KEYS[1] is not a hash; nothing is written.
local err = qc_check_type(KEYS[1], "hash")
if err then return err end
if redis.call("EXISTS", KEYS[1]) == 0 then
    return -1
end
local paused = redis.call("HEXISTS", KEYS[1], "paused") == 1
if ARGV[1] == "1" then
    if paused then return 0 end
    redis.call("HSET", KEYS[1], "paused", "1", "paused_by", ARGV[2], "paused_at", ARGV[3])
    return 1
end
if not paused then return 0 end
redis.call("HDEL", KEYS[1], "paused", "paused_by", "paused_at")
return 1
