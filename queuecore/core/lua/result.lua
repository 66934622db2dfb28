-- result: read a task for a caller that waits for its outcome, and ask to be woken when it is final.
--
-- KEYS[1] <prefix>:{<q>}:t:<id>     task HASH
-- KEYS[2] <prefix>:{<q>}:done:<id>  LIST  wake tokens, pushed when the task turns final (qc_wake)
-- ARGV[1] 1 = watch: when the task is not final (neither completed nor archived), mark it watched
--         (its "watch" field) so that the script that makes it final wakes KEYS[2], and drop the
--         tokens an earlier final state left in KEYS[2] (the task was run again since); 0 = only read
-- ARGV[2] the queue's key start, <prefix>:{<q>}: (its state ZSETs: <start><state>)
-- ARGV[3] the task id
-- ARGV[4] a result longer than this many bytes is left out, for the caller to read with HGET: Lua would
--         copy it twice, and Redis ran nothing else meanwhile (a 50 MB result held it 338 ms)
-- Returns the task HASH as a flat list (field, value, ...), as read before this call wrote anything;
-- an empty list when there is no such task (nothing is written then). For a scheduled, retry or
-- archived task the list ends with the pseudo-field "@score" and its score in that state's ZSET (when
-- it is due; when it was archived), when it is there; a result left out is the pseudo-field
-- "@result_bytes" and its length.
-- Cluster note: the state ZSET is built from ARGV[2], the queue's {<q>} tag (as KEYS), same slot.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when KEYS[1] has the wrong Redis
-- type; checked before any write, so nothing is written. Two lost wakes, where the caller finds the
-- outcome at its next look instead of being woken: a key of another type at KEYS[2] is left as it is
-- (no token can be pushed onto it, nor blocked on), and at maxmemory the mark is not written (pcall).
local err = qc_check_type(KEYS[1], "hash") if err then return err end
local fields
local result_bytes = redis.call("HSTRLEN", KEYS[1], "result")
if result_bytes > tonumber(ARGV[4]) then
    local names = {}
    for _, name in ipairs(redis.call("HKEYS", KEYS[1])) do
        if name ~= "result" then names[#names + 1] = name end
    end
    fields = {}
    if #names > 0 then  -- none: a corrupt task of a result alone
        local values = redis.call("HMGET", KEYS[1], unpack(names))
        for i, name in ipairs(names) do
            fields[#fields + 1] = name
            fields[#fields + 1] = values[i]
        end
    end
    fields[#fields + 1] = "@result_bytes"
    fields[#fields + 1] = result_bytes
else
    fields = redis.call("HGETALL", KEYS[1])
end
if ARGV[1] == "1" and #fields > 0 then
    local state = redis.call("HGET", KEYS[1], "state")
    if state ~= "completed" and state ~= "archived" then
        if not qc_check_type(KEYS[2], "list") then  -- absent or a list: a key of another type is left
            redis.call("DEL", KEYS[2])  -- first: frees memory
        end
        redis.pcall("HSET", KEYS[1], "watch", "1")
    end
end
local state
for i = 1, #fields, 2 do
    if fields[i] == "state" then
        state = fields[i + 1]
    end
end
if state == "scheduled" or state == "retry" or state == "archived" then
    local score = redis.pcall("ZSCORE", ARGV[2] .. state, ARGV[3])  -- a key of another type: no score
    if type(score) == "string" then
        fields[#fields + 1] = "@score"
        fields[#fields + 1] = score
    end
end
return fields
