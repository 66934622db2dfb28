-- bulk_snapshot: copy one state's ids (the pending LIST, or a state's ZSET) to a key of their own, so a
-- filtered bulk job finds its tasks by place in a list that does not move (bulkjobs.py): in the state
-- itself, each task a worker takes from the front (or the forwarder moves on) would shift every later
-- one a place forward, past the reader.
--
-- KEYS[1] <prefix>:{<q>}:<state>             LIST (pending) or ZSET
-- KEYS[2] <prefix>:{<q>}:bulk:<job id>       the copy, replaced when it exists
-- ARGV[1] "list" or "zset": the type KEYS[1] must have
-- ARGV[2] the copy's time to live, ms
-- Cluster note: both keys carry the queue's {<q>} tag, same slot.
-- Returns how many ids were copied (0: the state is empty, and there is no copy).
-- At maxmemory the COPY is refused (an OOM error reply), nothing written.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when KEYS[1] has the wrong type;
-- nothing is written then.
local err = qc_check_types(KEYS, {ARGV[1]}) if err then return err end
-- COPY first: at maxmemory Redis refuses it (it may grow memory) before anything is written; a write
-- that cannot grow memory (a DEL) first would let it through.
if redis.call("COPY", KEYS[1], KEYS[2], "REPLACE") == 0 then
    redis.call("DEL", KEYS[2])  -- the state is empty: no copy (not one an earlier driver left)
    return 0
end
redis.call("PEXPIRE", KEYS[2], ARGV[2])
if ARGV[1] == "list" then
    return redis.call("LLEN", KEYS[2])
end
return redis.call("ZCARD", KEYS[2])
