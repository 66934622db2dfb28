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
-- ARGV[1] now, unix ms
-- ARGV[2] SCAN cursor ("0" to start a new pass)
-- ARGV[3] SCAN COUNT hint (how much of the keyspace one call looks at)
-- ARGV[4] wake channel, published when pending turns non-empty
-- Cluster note: the task HASHes (<prefix>:{<q>}:t:<id>) are found with SCAN MATCH on a pattern
-- built from KEYS[1] (same {<q>} tag, so the same slot; on a cluster node SCAN sees that node's keys,
-- which hold the whole slot). Their ids are not known before the scan.
-- Returns {next cursor ("0" when a pass is complete), repaired, archived, task hashes looked at}.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when one of KEYS has the wrong
-- Redis type; checked before any write. A non-hash key under t: is skipped (not a task).
for i, want in ipairs({"list", "zset", "zset", "zset", "zset", "zset"}) do
    local t = redis.call("TYPE", KEYS[i])["ok"]
    if t ~= "none" and t ~= want then
        return redis.error_reply("QCWRONGTYPE " .. KEYS[i] .. " holds a " .. t .. ", expected a " .. want)
    end
end
local base = string.sub(KEYS[1], 1, -8)
local task_prefix = base .. "t:"
local pattern = string.gsub(task_prefix, "([%*%?%[%]\\])", "\\%1") .. "*"
local scan = redis.call("SCAN", ARGV[2], "MATCH", pattern, "COUNT", tonumber(ARGV[3]))
local now = tonumber(ARGV[1])
local zsets = {scheduled = KEYS[2], retry = KEYS[3], archived = KEYS[4], completed = KEYS[5], active = KEYS[6]}
local repaired, archived, seen = 0, 0, 0
local woke = false

-- Membership of the pending LIST costs O(its length) (LPOS), so it is only tested while the list is
-- short; with a long backlog a pending task hash counts as indexed and is looked at in a later pass.
local LPOS_LIMIT = 1000
local long_list = redis.call("LLEN", KEYS[1]) > LPOS_LIMIT

local function indexed(id, key)
    for i = 2, 6 do
        if redis.call("ZSCORE", KEYS[i], id) then
            return true
        end
    end
    if long_list then
        return redis.call("HGET", key, "state") == "pending"
    end
    return redis.call("LPOS", KEYS[1], id) ~= false
end

for _, key in ipairs(scan[2]) do
    local id = string.sub(key, #task_prefix + 1)
    if string.sub(key, 1, #task_prefix) == task_prefix and redis.call("TYPE", key)["ok"] == "hash" then
        seen = seen + 1
        if not indexed(id, key) then
            local f = redis.call("HMGET", key, "state", "msg", "failed_at", "completed_at")
            local state, msg = f[1], f[2]
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
                local reason = "repair: task hash had no list entry and "
                if not msg then
                    reason = reason .. "no message"
                else
                    reason = reason .. "an unknown state (" .. tostring(state or "none") .. ")"
                end
                redis.call("HSET", key, "state", "archived", "error", reason, "failed_at", ARGV[1])
                if not msg then
                    redis.call("HSET", key, "msg", "")
                end
                redis.call("ZADD", KEYS[4], now, id)
                archived = archived + 1
            end
        end
    end
end
if woke then
    redis.call("PUBLISH", ARGV[4], "1")
end
return {scan[1], repaired, archived, seen}
