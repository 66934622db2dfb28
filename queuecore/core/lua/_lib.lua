-- _lib: the prelude of helpers that scripts.py puts in front of every script: one EVALSHA body is the
-- helpers the script calls (with those they call, in this file's order) followed by the script, since
-- Redis defines every helper in the body anew on each call. Not a script of its own: no KEYS, no ARGV,
-- no wrapper; only small local helpers, each a "local function qc_..." closed by "end" at the start
-- of a line, with the comment lines right above it. Key names are never cut out of other key names: what a script needs (the task-key
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

-- True when ``state`` is one of the space-separated ``allowed`` (an operator's bulk job acts only on
-- tasks still in the state it found them in); "" (or none) allows any.
local function qc_state_allowed(state, allowed)
    return not allowed or allowed == "" or string.find(" " .. allowed .. " ", " " .. state .. " ", 1, true) ~= nil
end

-- Fencing a bulk job's driver: an error reply "QCLEASE ..." when ``allowed`` carries "until:<unix ms>"
-- and Redis's clock is past it (the driver's lease ran out, less a margin: another driver may have taken
-- the job up, and a driver that stalled must not act after it), else nil. Call before any write.
local function qc_bulk_lease_past(allowed)
    local until_ms = allowed and tonumber(string.match(allowed, "until:(%d+)"))
    if not until_ms then
        return nil
    end
    local now = redis.call("TIME")
    if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) > until_ms then
        return redis.error_reply("QCLEASE the bulk job's lease ran out before this act")
    end
    return nil
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

-- Publish message as target says: "PUBLISH <channel>", or "SPUBLISH <channel>" on a Redis 7 cluster
-- (sharded pub/sub: the message stays on the shard of the channel, which carries its queue's hash tag
-- and so lives in the script's slot). Nothing else is published.
local function qc_publish(target, message)
    local space = string.find(target, " ", 1, true)
    local command = space and string.sub(target, 1, space - 1)
    if command ~= "PUBLISH" and command ~= "SPUBLISH" then  -- scripts.py builds it: a bug, said aloud
        error("QCINVALID publish target " .. tostring(target))
    end
    return redis.call(command, string.sub(target, space + 1), message)  -- how many subscribers got it
end

-- The unique lock named in the "unique" field of the task HASH at key, when it is the queue's own
-- (it starts with base, "<prefix>:{<q>}:", so it shares the slot); nil otherwise. A name pointing
-- anywhere else (corrupt data, another queue's) is never looked at: on a Redis Cluster that would be
-- a key of another slot, which Redis refuses.
local function qc_own_lock(key, base)
    local lock = redis.call("HGET", key, "unique")
    if lock and string.sub(lock, 1, #base) == base then
        return lock
    end
end

-- A task deleted for good by a trim or an expiry releases the unique lock it holds, as an operator's
-- deletion does: its own lock (see qc_own_lock) is deleted when it still names the task (id). Reads
-- are pcalls: a key of another type is passed over, never an error after a write.
local function qc_release_own_lock(key, base, id)
    local lock = redis.pcall("HGET", key, "unique")
    if type(lock) == "string" and string.sub(lock, 1, #base) == base and redis.pcall("GET", lock) == id then
        redis.call("DEL", lock)
    end
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

-- True once a call has read bytes of task messages (or results): it stops after the one that got there,
-- since Redis runs a script whole and a message may be as long as the clients' max_payload_bytes (500
-- messages of 500 KB in one call held Redis 0.44 s). The same number as limits.CALL_BYTES.
local function qc_read_enough(bytes)
    return bytes >= 4194304
end

-- Take ids off the ZSET key.
local function qc_zrem_ids(key, ids)
    if #ids > 0 then
        redis.call("ZREM", key, unpack(ids))
    end
end

-- A whole-state bulk job's chunk (bulkjobs.py): the ids of KEYS state key (is_list: the pending LIST)
-- to act on, those that were in the state when the job was made, at b.since (unix ms), at most b.quota
-- of them, going on from the job's cursor (b.score, b.id, b.behind), with b.visits ids looked at at
-- most (b.state: the state's name). Returns the ids, the new cursor {score, id, count}, true when the
-- state has no more of the job's tasks, and for the LIST how many tasks are right of the ids
-- (qc_bulk_take). The helpers below, one per kind, say how.
local function qc_bulk_ids(key, is_list, task_prefix, b)
    -- Whole-state bulk jobs (bulkjobs.py) act only on the tasks that were in the state when the job was
    -- made, at since (unix ms). When a task entered its state: retry, its "failed_at" (retry.lua);
    -- completed, its "completed_at" (done.lua); pending, its "pending_since" (every move to pending sets
    -- it), else, never moved since its enqueue, the "enqueued_at" of its message; scheduled, its
    -- "scheduled_at" (park.lua), else the "enqueued_at" of its message; archived, its score (the walk
    -- reads no score above since). The "enqueued_at" (seconds) is the envelope's: the last
    -- ',"enqueued_at":' of the message (one in the payload comes before it; one in a string is escaped).
    local function enqueued_ms(msg)
        if type(msg) ~= "string" then
            return nil
        end
        local at, pos = nil, 1
        while true do
            local _, e = string.find(msg, ',"enqueued_at":', pos, true)
            if not e then
                break
            end
            at, pos = e + 1, e + 1
        end
        local seconds = at and tonumber(string.match(msg, "^[%d%.eE+-]+", at))
        return seconds and math.floor(seconds * 1000)
    end

    -- Bytes of messages read so far by this call: a walk stops before the next task once it has read
    -- enough (qc_read_enough). Only pending and scheduled tasks' messages are read (their "enqueued_at").
    local read = {bytes = 0}

    -- True when the task id of state entered it after since; false when before, when not known (a hash
    -- without the field and message: it counts as there), gone, or of another Redis type (the caller's
    -- own type check refuses that one).
    local function entered_after(task_prefix, id, state, since)
        local field = ({retry = "failed_at", completed = "completed_at", pending = "pending_since",
            scheduled = "scheduled_at"})[state]
        if not field then
            return false
        end
        local key = qc_task_key(task_prefix, id)
        if state == "retry" or state == "completed" then  -- the field is always there: no message to read
            local at = redis.pcall("HGET", key, field)
            return type(at) == "string" and tonumber(at) ~= nil and tonumber(at) > since
        end
        local at = redis.pcall("HGET", key, field)
        if type(at) == "table" then  -- an error reply: not a hash
            return false
        end
        at = tonumber(at or "")
        if not at then  -- not set since its enqueue: the message says when that was
            local msg = redis.call("HGET", key, "msg")
            read.bytes = read.bytes + (msg and #msg or 0)
            at = enqueued_ms(msg)
        end
        return at ~= nil and at > since
    end

    -- A bulk job's chunk of a ZSET state: walks it by (score, id) from the cursor b.score, b.id ("" =
    -- from the start; b.behind: how many ids at b.score up to b.id were passed and left there), visiting
    -- at most b.visits ids and keeping at most b.quota of those that were there at b.since (the others
    -- are passed, left as they are), and stopping early once it has read enough messages (qc_read_enough).
    -- Per call: one ZRANGEBYSCORE, and per id visited one HGET (retry, completed) or HMGET.
    -- Returns the ids kept, the new cursor {score, id, behind}, and true when the walk reached the end.
    local function zset_ids(key, task_prefix, b)
        local max = b.state == "archived" and b.since or "+inf"
        local min = b.score == "" and "-inf" or b.score
        local cs = tonumber(b.score)
        local function passed(id, score)
            return b.id ~= "" and tonumber(score) == cs and id <= b.id
        end
        local items, want
        if b.id ~= "" and b.behind > 0 then  -- start at the last id passed, when it is still there
            want = b.visits + 1
            items = redis.call("ZRANGEBYSCORE", key, min, max, "WITHSCORES", "LIMIT", b.behind - 1, want)
            if not (items[1] and passed(items[1], items[2])) then
                items = nil
            end
        end
        if not items then
            want = b.visits + b.behind
            items = redis.call("ZRANGEBYSCORE", key, min, max, "WITHSCORES", "LIMIT", 0, want)
        end
        local ids, cursor, visited, stopped = {}, {b.score, b.id, b.behind}, 0, false
        for i = 1, #items, 2 do
            local id, score = items[i], items[i + 1]
            if not passed(id, score) then
                if #ids >= b.quota or visited >= b.visits or qc_read_enough(read.bytes) then
                    stopped = true
                    break
                end
                visited = visited + 1
                if tonumber(score) ~= tonumber(cursor[1]) then
                    cursor[3] = 0
                end
                cursor[1], cursor[2] = score, id
                if b.state ~= "archived" and entered_after(task_prefix, id, b.state, b.since) then
                    cursor[3] = cursor[3] + 1  -- passed, left there
                else
                    ids[#ids + 1] = id
                end
            end
        end
        return ids, cursor, not stopped and #items < 2 * want
    end

    -- A bulk job's chunk of the pending LIST: the tasks there at b.since form one run of it (tasks join
    -- only at its ends: enqueues and runs on the left, priority tasks and tasks handed back on the right),
    -- taken from its right end, the oldest, at most b.quota. The run's ends are found by when each task
    -- entered pending (entered_after), looked up at O(log n) places from b.behind, the number of later
    -- tasks right of the run at the last call. Returns the ids (oldest first), the cursor {"", "", number
    -- of later tasks right of the run}, true when the run ends in this chunk, and where the ids are (how
    -- many tasks are right of them) for qc_bulk_take.
    local function list_ids(key, task_prefix, b)
        local len = redis.call("LLEN", key)
        if len == 0 then
            return {}, {"", "", 0}, true, 0
        end
        local function later(i)  -- the task i places from the right end joined after since
            local id = redis.call("LINDEX", key, -(i + 1))
            return id ~= false and entered_after(task_prefix, id, "pending", b.since)
        end
        local function first(lo, hi, want)  -- the first of lo .. hi-1 for which later() is want (hi: none)
            while lo < hi do
                local mid = math.floor((lo + hi) / 2)
                if later(mid) == want then
                    hi = mid
                else
                    lo = mid + 1
                end
            end
            return lo
        end
        local h, lo, hi, step = math.min(b.behind, len - 1), 0, 0, 1
        if later(h) then  -- the later tasks grew: look further left, doubling the step
            lo, hi = h + 1, len
            while h + step < len do
                if not later(h + step) then
                    hi = h + step
                    break
                end
                lo, step = h + step + 1, step * 2
            end
        else  -- fewer: look right, doubling the step
            lo, hi = 0, h
            while h - step >= 0 do
                if later(h - step) then
                    lo = h - step + 1
                    break
                end
                hi, step = h - step, step * 2
            end
        end
        local c = first(lo, hi, false)
        local n = math.min(b.quota, len - c)
        if n <= 0 then
            return {}, {"", "", c}, true, c
        end
        local items = redis.call("LRANGE", key, -(c + n), -(c + 1))
        local k, ends = n, c + n == len
        if later(c + n - 1) then  -- the run ends in this window: tasks enqueued since are left of it
            k, ends = first(c, c + n - 1, true) - c, true
        end
        local ids = {}
        for j = 0, k - 1 do
            ids[#ids + 1] = items[#items - j]
        end
        return ids, {"", "", c}, ends, c
    end

    if is_list then
        return list_ids(key, task_prefix, b)
    end
    local ids, cursor, ends = zset_ids(key, task_prefix, b)
    return ids, cursor, ends, 0
end

-- The ids one call of a state's bulk script takes (admin_*_all.lua): the job's bound in
-- args[first .. first + 5] (args: the script's ARGV; since ms, state, cursor score, cursor id,
-- cursor count, quota; limit ids looked at) given to qc_bulk_ids. Returns the ids, the new cursor,
-- whether the state ended, and for the LIST how many tasks are right of the ids.
local function qc_bulk_chunk(key, is_list, task_prefix, limit, args, first)
    local bound = {since = tonumber(args[first]), state = args[first + 1], score = args[first + 2],
        id = args[first + 3], behind = tonumber(args[first + 4]), quota = tonumber(args[first + 5]), visits = limit}
    if is_list then
        bound.quota = math.min(bound.quota, bound.visits)
    end
    return qc_bulk_ids(key, is_list, task_prefix, bound)
end

-- Take ids (from qc_bulk_ids: the k tasks right after the first c from the right end) off the
-- pending LIST key: an LTRIM when they are at the right end; else the first with an LREM from the
-- right (a write that never grows memory: at maxmemory the rest may follow), the others overwritten
-- with a marker that one LREM from the right then removes.
local function qc_bulk_take(key, ids, c)
    if #ids == 0 then
        return
    elseif c == 0 then
        redis.call("LTRIM", key, 0, -(#ids + 1))
        return
    end
    redis.call("LREM", key, -1, ids[1])
    for j = 2, #ids do
        redis.call("LSET", key, -(c + j - 1), "\0qc-taken")
    end
    if #ids > 1 then
        redis.call("LREM", key, -(#ids - 1), "\0qc-taken")
    end
end

-- Take the ids of a bulk script's chunk (qc_bulk_chunk) off key: on the pending LIST, qc_bulk_take
-- (right: how many tasks are right of them); on a ZSET, ZREM.
local function qc_bulk_remove(key, is_list, ids, right)
    if is_list then
        qc_bulk_take(key, ids, right)
    else
        qc_zrem_ids(key, ids)
    end
end

-- Move ids off the ZSET zset onto the pending LIST (pushed on the left, as new work), each pending
-- since now; an id whose task hash is gone is only dropped. Publishes on wake when pending turns
-- non-empty. Returns how many were moved (those whose hash was there).
local function qc_move_to_pending(task_prefix, ids, zset, pending, now, wake)
    if #ids == 0 then
        return 0
    end
    local was_empty, moved = redis.call("LLEN", pending) == 0, 0
    for _, id in ipairs(ids) do
        local key = qc_task_key(task_prefix, id)
        if redis.call("EXISTS", key) == 1 then
            redis.call("HSET", key, "state", "pending", "pending_since", now)
            redis.call("LPUSH", pending, id)
            moved = moved + 1
        end
        redis.call("ZREM", zset, id)
    end
    if was_empty and moved > 0 then
        qc_publish(wake, "1")
    end
    return moved
end

-- A history field of the task HASH at key (newest first): put line ("" = nothing to record) in front
-- of field, keeping at most max_lines lines and max_bytes bytes (the oldest lines go first; the
-- newest always stays), so trimming is a cut at the end. qc_push_attempt: the attempt history
-- (attempts.py, one line of JSON per attempt); the operators' edits go to "edits".
local function qc_push_line(key, field, line, max_lines, max_bytes, old)
    if line == nil or line == "" then
        return
    end
    if old == nil then  -- not read by the caller (false: read, and absent)
        old = redis.call("HGET", key, field)
    end
    local text = line
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
    redis.call("HSET", key, field, string.sub(text, 1, keep))
end

-- An attempt's number is the worker's count (retries used + 1), which an operator's run of a task
-- whose retries were spent does not move: that run would repeat the number of the attempt before it.
-- It gets the next number instead. A snoozed attempt consumes none: the run after it keeps its number.
local function qc_push_attempt(key, line, max_lines, max_bytes)
    if line == nil or line == "" then
        return
    end
    local old = redis.call("HGET", key, "attempts")
    if old then
        local ok, newest = pcall(cjson.decode, string.match(old, "^[^\n]*"))
        local last = ok and type(newest) == "table" and tonumber(newest["attempt"])
        if last and newest["result"] ~= "snoozed" then
            local parsed, entry = pcall(cjson.decode, line)
            local number = parsed and type(entry) == "table" and tonumber(entry["attempt"])
            if number and number <= last then
                entry["attempt"] = last + 1
                line = cjson.encode(entry)
            end
        end
    end
    qc_push_line(key, "attempts", line, max_lines, max_bytes, old)
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

-- Per-type statistics (typestats.py). An accumulator maps a type to a vector of counters:
-- 1 processed, 2 failed, 3 retried, 4 archived, 5 recovered, 6 timed, 7 duration sum (ms), then one
-- count per duration bucket (upper bounds in qc_ts_new, ms, as typestats.BUCKETS_MS; then +Inf): 24.

-- A new accumulator: the vectors per type, and the bucket bounds (built once per call, not per task).
local function qc_ts_new()
    return {types = {}, bounds = {5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000,
        900000, 3600000}}
end

-- Count one attempt of type_name: add 1 to each counter index in `fields`, and its handler's duration
-- (ms; nil or negative = not known).
local function qc_ts_add(acc, type_name, fields, duration_ms)
    if type_name == "" then return end  -- not known: not counted per type
    local v = acc.types[type_name]
    if not v then
        v = {}
        for i = 1, 24 do v[i] = 0 end
        acc.types[type_name] = v
    end
    for _, f in ipairs(fields) do v[f] = v[f] + 1 end
    if duration_ms and duration_ms >= 0 then
        v[6] = v[6] + 1
        v[7] = v[7] + duration_ms
        local bounds = acc.bounds
        local b = #bounds + 1
        for i = 1, #bounds do
            if duration_ms <= bounds[i] then b = i break end
        end
        v[7 + b] = v[7 + b] + 1
    end
end

-- Write an accumulator; ctx is the context typestats.context() builds (seven ARGV fields, passed as
-- a table): the key prefix <prefix>:{<q>}:ts, hour (since the epoch), minute of the hour, month
-- (YYYY-MM), day of the month, when the hour's and the month's keys expire (unix s). Per type: the
-- totals, the minute and the day, each one HGET and one HSET of a packed vector (trailing zeros
-- dropped); the minute's and the day's keys get their EXPIREAT when the call adds a field (once a
-- minute, once a day). An empty prefix writes nothing (statistics off, WorkerConfig.type_stats).
-- A key of another Redis type is left alone: statistics never cost an acknowledgement.
local function qc_ts_write(acc, ctx)
    if ctx[1] == "" then return end  -- statistics off (WorkerConfig.type_stats): nothing written
    local function merge(key, f, v)
        local old = redis.pcall("HGET", key, f)
        if type(old) == "table" then return false end  -- another Redis type: left alone
        local sum, i = {}, 1
        if old then
            for part in string.gmatch(old, "[^,]+") do
                if i > 24 then break end
                sum[i] = tonumber(part) or 0
                i = i + 1
            end
        end
        local last = 0
        for j = 1, 24 do
            sum[j] = (sum[j] or 0) + v[j]
            if sum[j] ~= 0 then last = j end
        end
        for j = last + 1, 24 do sum[j] = nil end
        return redis.pcall("HSET", key, f, table.concat(sum, ",")) == 1  -- true: a new field
    end
    local prefix = ctx[1]
    for type_name, v in pairs(acc.types) do
        merge(prefix, type_name, v)
        local minute_key = prefix .. ":" .. type_name .. ":m:" .. ctx[2]
        if merge(minute_key, ctx[3], v) then
            redis.pcall("EXPIREAT", minute_key, ctx[6])
        end
        local day_key = prefix .. ":" .. type_name .. ":d:" .. ctx[4]
        if merge(day_key, ctx[5], v) then
            redis.pcall("EXPIREAT", day_key, ctx[7])
        end
    end
end
