-- periodic_register: a worker lists the periodic entries it runs as live until a time, and takes
-- off the list the entries no worker declared for long (their declaration lapsed before a time).
-- A member scored in the past stays in the zset, not live (the Inspector lists members scored from now).
--
-- KEYS[1] <prefix>:periodic   ZSET  "<name>/<queue>" -> when its declaration lapses (unix ms)
-- ARGV[1] unix ms: the members whose declaration lapsed before this are removed
-- ARGV[2] until, unix ms: this worker's entries are live until then (a later score is kept)
-- ARGV[3..] the members "<name>/<queue>" this worker declares
-- Returns the members that lapsed (removed): the caller forgets their state (periodic_forget.lua).
-- Error reply "QCWRONGTYPE ..." when KEYS[1] is not a zset; nothing is written.
local err = qc_check_type(KEYS[1], "zset")
if err then return err end
local until_ms = tonumber(ARGV[2])
for i = 3, #ARGV do
    local score = tonumber(redis.call("ZSCORE", KEYS[1], ARGV[i]) or "0")
    if score < until_ms then
        redis.call("ZADD", KEYS[1], until_ms, ARGV[i])
    end
end
local lapsed = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", "(" .. ARGV[1])
if #lapsed > 0 then
    redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", "(" .. ARGV[1])
end
return lapsed
