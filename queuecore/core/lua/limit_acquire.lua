-- limit_acquire: may a task of a limited type start now? Takes a concurrency slot and a place in the
-- rate window together, or neither (flow.py). All keys of one limit share the hash tag {lim:<type>}.
--
-- KEYS[1] <prefix>:{lim:<type>}:running[:<key>]  ZSET  "<queue> <id> <lease>" -> slot expiry (unix ms)
-- KEYS[2] <prefix>:{lim:<type>}:waiting[:<key>]  ZSET  "<queue> <id>" -> since (unix ms), held back
-- KEYS[3] <prefix>:{lim:<type>}:rate[:<key>]     ZSET  "<queue> <id> <ms>" -> start (unix ms)
-- KEYS[4] <prefix>:{lim:<type>}:cursor           HASH  <key> -> the next rate place to hand out (ms);
--         expires after the last place (an earlier version also kept held-back tasks' places here, as
--         "<key>|<queue> <id>": such a place is still taken, once)
-- KEYS[5] <prefix>:{lim:<type>}:keys             ZSET  <key> -> last use (unix ms), for operators;
--         keys unused for a day leave it (and the cursor HASH), 100 at a time
-- KEYS[6] <prefix>:{lim:<type>}:places           ZSET  "<key>|<queue> <id>" -> the place a held-back
--         task was given (ms); a place an hour (and a window) past is dropped, 100 at a time: its task
--         was deleted while held back, or comes back as a newcomer
-- ARGV[1] member, "<queue> <id>"
-- ARGV[2] now, unix ms
-- ARGV[3] slot expiry, unix ms (the task's lease; renewed by limit_extend)
-- ARGV[4] concurrency limit (0 = none)
-- ARGV[5] rate limit: starts per window (0 = none)
-- ARGV[6] rate window, ms
-- ARGV[7] the limit key ("" = the type's one limit)
-- ARGV[8] the slot's name in KEYS[1], "<queue> <id> <lease>": the attempt's own, so that an attempt
--         that ends after its task was taken back and started again frees only its own slot
-- Expired slots (a killed worker's) are dropped first: a slot is never leaked past its expiry.
-- Returns {1} taken; {0, "concurrency", earliest slot expiry ms, tasks waiting ahead of this one (its
-- place in KEYS[2], or all of them for a task not listed there yet)}: all slots busy;
-- {0, "rate", due ms}:
-- come back at due. Each task held back by the rate gets its own place, window / limit apart, and
-- keeps its turn: while places are outstanding a newcomer queues behind them, and a task coming back
-- to a full window (clock jitter) waits for the next free moment without losing its place.
-- Error reply "QCWRONGTYPE ..." when a key has the wrong Redis type; checked before any write.
local err = qc_check_types(KEYS, {"zset", "zset", "zset", "hash", "zset", "zset"}) if err then return err end
local member, now, slot = ARGV[1], tonumber(ARGV[2]), ARGV[8]
local conc, rate, window = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if conc > 0 then
    redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
    if not redis.call("ZSCORE", KEYS[1], slot) and redis.call("ZCARD", KEYS[1]) >= conc then
        local first = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
        local ahead = redis.call("ZRANK", KEYS[2], member) or redis.call("ZCARD", KEYS[2])
        return {0, "concurrency", tonumber(first[2]), ahead}
    end
end
if rate > 0 then
    redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", now - window)
    local count = redis.call("ZCARD", KEYS[3])
    local cursor = tonumber(redis.call("HGET", KEYS[4], ARGV[7]) or "0")
    local turn = ARGV[7] .. "|" .. member  -- a held-back task's place (the key holds no "|")
    local stale = redis.call("ZRANGEBYSCORE", KEYS[6], "-inf", now - window - 3600000, "LIMIT", 0, 100)
    if #stale > 0 then
        redis.call("ZREM", KEYS[6], unpack(stale))
    end
    local reserved = redis.call("ZSCORE", KEYS[6], turn)
    if not reserved then  -- given by an earlier version
        reserved = redis.call("HGET", KEYS[4], turn)
        if reserved then
            redis.call("HDEL", KEYS[4], turn)
        end
    end
    -- A task with a place may start when the window has room; any other only when no held-back task
    -- waits for a place still to come (cursor in the past), so newcomers never pass them.
    if count >= rate or (not reserved and cursor > now) then
        local due = now
        if count >= rate then
            local nth = redis.call("ZRANGE", KEYS[3], count - rate, count - rate, "WITHSCORES")
            due = tonumber(nth[2]) + window
        end
        if not reserved then  -- a newcomer: the next place, window / limit after the last one
            if cursor > due then
                due = cursor
            end
            redis.call("HSET", KEYS[4], ARGV[7], due + math.floor(window / rate))
        end
        redis.call("ZADD", KEYS[6], due, turn)
        if redis.call("PTTL", KEYS[4]) < due - now + window + 60000 then
            redis.call("PEXPIRE", KEYS[4], due - now + window + 60000)
        end
        if redis.call("PTTL", KEYS[6]) < due - now + window + 3600000 then
            redis.call("PEXPIRE", KEYS[6], due - now + window + 3600000)
        end
        return {0, "rate", due}
    end
    if reserved then
        redis.call("ZREM", KEYS[6], turn)
    end
    redis.call("ZADD", KEYS[3], now, member .. " " .. now)
    redis.call("PEXPIRE", KEYS[3], window + 1000)
end
if conc > 0 then
    redis.call("ZADD", KEYS[1], ARGV[3], slot)
    redis.call("ZREM", KEYS[2], member)
end
redis.call("ZADD", KEYS[5], now, ARGV[7])
local idle = redis.call("ZRANGEBYSCORE", KEYS[5], "-inf", now - 86400000, "LIMIT", 0, 100)  -- keys unused a day
if #idle > 0 then
    redis.call("ZREM", KEYS[5], unpack(idle))
    redis.call("HDEL", KEYS[4], unpack(idle))
end
return {1}
