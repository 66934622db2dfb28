-- repair: find task hashes that no list or zset points at, and put each back where its state says.
-- Runs one bounded SCAN step per call (the caller keeps the cursor across calls), so it never
-- blocks Redis for long. A hash whose state is
--   pending             goes back to the front of pending (it is old work);
--   scheduled, retry    goes back to its zset, due now (the original due time is not kept);
--   archived            goes back to archived, scored by its failed_at (or now);
--   completed           goes back to completed, expiring at completed_at + retention (or now);
--   active              goes back to active with an expired lease (score now), so the next
--                       recover round takes it back as a lost attempt;
-- and a hash with an unknown or missing state, or without a message, is archived with a reason.
--
-- KEYS[1] <prefix>:{<q>}:pending    LIST
-- KEYS[2] <prefix>:{<q>}:scheduled  ZSET
-- KEYS[3] <prefix>:{<q>}:retry      ZSET
-- KEYS[4] <prefix>:{<q>}:archived   ZSET
-- KEYS[5] <prefix>:{<q>}:completed  ZSET
-- KEYS[6] <prefix>:{<q>}:active     ZSET
-- KEYS[7] <prefix>:{<q>}:repair     HASH  the shared pass: cursor, next_at (unix ms)
-- ARGV[1] now, unix ms
-- ARGV[2] SCAN cursor ("0" to start a new pass), or "" to continue the pass shared by all workers
--         (the cursor kept in KEYS[7], saved back after the step)
-- ARGV[3] SCAN COUNT hint (how much of the keyspace one call looks at)
-- ARGV[4] wake target (qc_publish: "[S]PUBLISH <prefix>:{<q>}:wake"), published when pending
--         turns non-empty
-- ARGV[5] turn length in ms: when > 0 the step runs only if next_at has passed, and sets next_at to
--         now + this, so that across all workers one takes a turn per period; 0 runs unconditionally
-- ARGV[6] task-key prefix, <prefix>:{<q>}:t:
-- ARGV[7] error of a hash archived without a message (reasons.REPAIR_NO_MESSAGE)
-- ARGV[8] error of a hash archived with an unknown or missing state (reasons.REPAIR_UNKNOWN_STATE),
--         followed here by " (<state>)"
-- ARGV[9] wake-key prefix, <prefix>:{<q>}:done: (a watched task archived here wakes its waiters)
-- ARGV[10] how long a wake token is kept, ms
-- Cluster note: the task HASHes (<prefix>:{<q>}:t:<id>) are found with SCAN MATCH on a pattern
-- built from ARGV[6] (same {<q>} tag as KEYS, so the same slot; on a cluster node SCAN sees that
-- node's keys, which hold the whole slot). Their ids are not known before the scan. The wake LIST
-- of a watched task it archives (<prefix>:{<q>}:done:<id>) is built from ARGV[9], same slot.
-- A call stops once it has read 4 MB of messages (180 orphans of 500 KB held Redis 0.69 s in one call)
-- and then gives back the cursor it started from: the next call looks at the same keys again, and
-- those repaired are indexed by then.
-- Returns {next cursor, repaired, archived, task hashes looked at, 1 when the pass is complete (the
-- cursor wrapped to "0" and the step did not stop early: one that stopped at cursor "0" gives back
-- "0" with a pass still to finish) else 0}; {"", 0, 0, -1, 0} when it is not yet time for another
-- turn (ARGV[5] > 0).
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when one of KEYS has the wrong
-- Redis type; checked before any write. A non-hash key under t: is skipped (not a task).
-- wrong-type guard
local wanted = {"list", "zset", "zset", "zset", "zset", "zset", "hash"}
local err = qc_check_types(KEYS, wanted) if err then return err end
local task_prefix = ARGV[6]
local pattern = string.gsub(task_prefix, "([%*%?%[%]\\])", "\\%1") .. "*"
local now = tonumber(ARGV[1])
local turn = tonumber(ARGV[5])
if turn > 0 then
    if now < tonumber(redis.call("HGET", KEYS[7], "next_at") or "0") then
        return {"", 0, 0, -1, 0}
    end
    redis.call("HSET", KEYS[7], "next_at", now + turn)
end
local cursor = ARGV[2]
if cursor == "" then
    cursor = redis.call("HGET", KEYS[7], "cursor") or "0"
end
local scan = redis.call("SCAN", cursor, "MATCH", pattern, "COUNT", tonumber(ARGV[3]))
local zsets = {scheduled = KEYS[2], retry = KEYS[3], archived = KEYS[4], completed = KEYS[5], active = KEYS[6]}
local repaired, archived, seen = 0, 0, 0
local woke = false

-- Membership of the pending LIST costs O(its length) (LPOS), so it is only tested while the list is
-- short; with a long backlog a pending task hash counts as indexed and is looked at in a later pass.
local LPOS_LIMIT = 1000
local long_list = redis.call("LLEN", KEYS[1]) > LPOS_LIMIT

local state_index = {scheduled = 2, retry = 3, archived = 4, completed = 5, active = 6}

-- Is the task in some list or zset? Its state's own index is looked at first (one command in the
-- usual case), then the others.
local function indexed(id, state)
    local own = state_index[state]
    if own and redis.call("ZSCORE", KEYS[own], id) then
        return true
    end
    if state == "pending" then
        if long_list or redis.call("LPOS", KEYS[1], id) ~= false then
            return true
        end
    end
    for i = 2, 6 do
        if i ~= own and redis.call("ZSCORE", KEYS[i], id) then
            return true
        end
    end
    return state ~= "pending" and not long_list and redis.call("LPOS", KEYS[1], id) ~= false
end

local read, stopped = 0, false  -- bytes of messages read (a message may be as long as max_payload_bytes)
for _, key in ipairs(scan[2]) do
    if qc_read_enough(read) then
        stopped = true
        break
    end
    local id = string.sub(key, #task_prefix + 1)
    -- HGET fails on a key that is no hash (skipped: not a task) and is nil for a missing key or a
    -- hash without a state, which EXISTS tells apart.
    local state = nil
    if string.sub(key, 1, #task_prefix) == task_prefix then
        local got = redis.pcall("HGET", key, "state")
        if got == false then
            state = redis.call("EXISTS", key) == 1 and "" or nil  -- a hash without a state, or gone
        elseif type(got) == "string" then
            state = got
        end  -- else an error: not a hash
    end
    if state then
        seen = seen + 1
        if not indexed(id, state) then
            local f = redis.call("HMGET", key, "state", "msg", "failed_at", "completed_at")
            local state, msg = f[1], f[2]
            read = read + (msg and #msg or 0)
            if not msg then
                state = nil
            end
            if state == "pending" then
                redis.call("HSET", key, "pending_since", ARGV[1])
                if redis.call("RPUSH", KEYS[1], id) == 1 then
                    woke = true
                end
                repaired = repaired + 1
            elseif state == "scheduled" or state == "retry" or state == "active" then
                redis.call("ZADD", zsets[state], now, id)
                repaired = repaired + 1
            elseif state == "archived" then
                redis.call("ZADD", KEYS[4], tonumber(f[3] or "") or now, id)
                repaired = repaired + 1
            elseif state == "completed" then
                local expires = now
                local ok, decoded = pcall(cjson.decode, msg)
                local at = tonumber(f[4] or "")
                if ok and type(decoded) == "table" and type(decoded["retention"]) == "number" and at then
                    expires = at + math.floor(decoded["retention"] * 1000)
                end
                redis.call("ZADD", KEYS[5], expires, id)
                repaired = repaired + 1
            else
                local reason = ARGV[7]
                if msg then
                    reason = ARGV[8] .. " (" .. tostring(state or "none") .. ")"
                end
                redis.call("HSET", key, "state", "archived", "error", reason, "failed_at", ARGV[1])
                if not msg then
                    redis.call("HSET", key, "msg", "")
                end
                redis.call("ZADD", KEYS[4], now, id)
                qc_wake_if_watched(key, qc_done_key(ARGV[9], id), ARGV[10])
                archived = archived + 1
            end
        end
    end
end
if woke then
    qc_publish(ARGV[4], "1")
end
local next_cursor = stopped and cursor or scan[1]  -- stopped early: the same keys again next call
if ARGV[2] == "" then
    redis.call("HSET", KEYS[7], "cursor", next_cursor)
end
return {next_cursor, repaired, archived, seen, (not stopped and scan[1] == "0") and 1 or 0}
