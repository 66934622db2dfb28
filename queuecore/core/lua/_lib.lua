-- _lib: the prelude that scripts.py puts in front of every script, so one EVALSHA body is this file
-- followed by the script. Not a script of its own: no KEYS, no ARGV, no wrapper; only small local
-- helpers. Key names are never cut out of other key names: what a script needs (the task-key
-- prefix "<prefix>:{<q>}:t:", the queue's "<prefix>:{<q>}:" start) comes in ARGV.
--
-- Wrong-type refusal: the error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>"
-- (redis_errors.py parses it), returned before any write, since a Lua error midway is not rolled
-- back. A helper cannot return from its caller, so a check returns the reply (or nil) and the
-- script passes it on:  local err = qc_check_types(KEYS, {"hash", "zset"}) if err then return err end

-- The refusal for key, which holds a got (looked up when not given) where a want belongs.
local function qc_refuse(key, want, got)
    got = got or redis.call("TYPE", key)["ok"]
    return redis.error_reply("QCWRONGTYPE " .. key .. " holds a " .. got .. ", expected a " .. want)
end

-- The refusal of malformed arguments: "QCINVALID <where> <field> <value>" (the client words it),
-- returned before any write.
local function qc_invalid(where, field, value)
    return redis.error_reply("QCINVALID " .. where .. " " .. field .. " " .. tostring(value))
end

-- The reply for a failed redis.pcall (its error table failed): the wrong-type refusal for key when
-- Redis said WRONGTYPE; any other error (an out-of-memory refusal, say) passed on as it came, so
-- that Redis being full is never reported as corrupt data.
local function qc_pcall_refusal(failed, key, want)
    if string.find(failed["err"], "WRONGTYPE", 1, true) then
        return qc_refuse(key, want)
    end
    return failed
end

-- The refusal when key exists with a type other than want; nil when it is a want or missing.
local function qc_check_type(key, want)
    local got = redis.call("TYPE", key)["ok"]
    if got ~= "none" and got ~= want then
        return qc_refuse(key, want, got)
    end
end

-- qc_check_type of keys[i] against wanted[i], in order: the first refusal, or nil.
local function qc_check_types(keys, wanted)
    for i, want in ipairs(wanted) do
        local err = qc_check_type(keys[i], want)
        if err then
            return err
        end
    end
end

-- Fencing: true when the task HASH at key is active under lease number lease (a string, as in ARGV).
local function qc_holds_lease(key, lease)
    local held = redis.call("HMGET", key, "state", "lease")
    return held[1] == "active" and held[2] == lease
end

-- Count attempts in the stats HASH: processed and failed, in total, per day and per minute (the
-- field suffixes ":<day>", ":<minute>" come in ARGV). One HINCRBY per field.
local function qc_count_attempts(stats, day, minute, processed, failed)
    for _, suffix in ipairs({"", ":" .. day, ":" .. minute}) do
        redis.call("HINCRBY", stats, "processed" .. suffix, processed)
        if failed > 0 then
            redis.call("HINCRBY", stats, "failed" .. suffix, failed)
        end
    end
end

-- The task HASH of id, from the task-key prefix "<prefix>:{<q>}:t:" the wrapper passed in ARGV.
local function qc_task_key(task_prefix, id)
    return task_prefix .. id
end

-- qc_check_type(<task hash>, "hash") for each of ids: the first refusal, or nil.
local function qc_check_task_hashes(task_prefix, ids)
    for _, id in ipairs(ids) do
        local err = qc_check_type(qc_task_key(task_prefix, id), "hash")
        if err then
            return err
        end
    end
end

-- Up to n ids of key, read only: the right end of a LIST (is_list, the oldest), else the lowest
-- scores of a ZSET. qc_remove_ids(key, is_list, ids) then takes exactly those off key.
local function qc_peek_ids(key, is_list, n)
    if n <= 0 then
        return {}
    elseif is_list then
        return redis.call("LRANGE", key, -n, -1)
    end
    return redis.call("ZRANGE", key, 0, n - 1)
end

local function qc_remove_ids(key, is_list, ids)
    if #ids == 0 then
        return
    elseif is_list then
        redis.call("LTRIM", key, 0, -(#ids + 1))
    else
        redis.call("ZREM", key, unpack(ids))
    end
end

-- Move ids off the ZSET zset onto the pending LIST (pushed on the left, as new work), each pending
-- since now; an id whose task hash is gone is only dropped. Publishes on wake when pending turns
-- non-empty. Returns #ids.
local function qc_move_to_pending(task_prefix, ids, zset, pending, now, wake)
    if #ids == 0 then
        return 0
    end
    local was_empty = redis.call("LLEN", pending) == 0
    for _, id in ipairs(ids) do
        local key = qc_task_key(task_prefix, id)
        if redis.call("EXISTS", key) == 1 then
            redis.call("HSET", key, "state", "pending", "pending_since", now)
            redis.call("LPUSH", pending, id)
        end
        redis.call("ZREM", zset, id)
    end
    if was_empty and redis.call("LLEN", pending) > 0 then
        redis.call("PUBLISH", wake, "1")
    end
    return #ids
end

-- Attempt history (attempts.py): put line (one attempt, one line of JSON; "" = nothing to record) in
-- front of the "attempts" field of the task HASH at key, keeping at most max_lines lines and
-- max_bytes bytes (the oldest lines go first). Newest first, so trimming is a cut at the end.
local function qc_push_attempt(key, line, max_lines, max_bytes)
    if line == nil or line == "" then
        return
    end
    local text = line
    local old = redis.call("HGET", key, "attempts")
    if old then
        text = line .. "\n" .. old
    end
    local keep, pos, count = #text, 0, 0  -- keep: the last byte kept; pos: the newline before a line
    while true do
        local nl = string.find(text, "\n", pos + 1, true)
        count = count + 1
        if count > 1 and (count > max_lines or (nl or #text + 1) - 1 > max_bytes) then
            keep = pos - 1  -- this line and older ones go (the newest line always stays)
            break
        end
        if not nl then
            break
        end
        pos = nl
    end
    redis.call("HSET", key, "attempts", string.sub(text, 1, keep))
end

-- Waiting for a result (results.py): a caller marks the task HASH it waits for as watched (its
-- "watch" field, set by the result script) and blocks on the task's wake LIST
-- "<prefix>:{<q>}:done:<id>". The script that makes a watched task final (completed, archived,
-- deleted) pushes a token there, kept ttl_ms. Best effort (pcall): a key of another type there, or
-- Redis at maxmemory, only loses the token, and waiters look at the task again within their wait.

-- The wake LIST of id, from the wake-key prefix "<prefix>:{<q>}:done:" the wrapper passed in ARGV.
local function qc_done_key(done_prefix, id)
    return done_prefix .. id
end

local function qc_wake(done_key, ttl_ms)
    redis.pcall("LPUSH", done_key, "1")
    redis.pcall("PEXPIRE", done_key, ttl_ms)
end

-- qc_wake when the task HASH at key (known to be a hash) is watched.
local function qc_wake_if_watched(key, done_key, ttl_ms)
    if redis.call("HEXISTS", key, "watch") == 1 then
        qc_wake(done_key, ttl_ms)
    end
end
