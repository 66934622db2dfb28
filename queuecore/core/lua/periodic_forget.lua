-- periodic_forget: delete the state of a periodic entry no live worker declares any more (its mark,
-- pause and recent fires), unless a worker declared it again since.
--
-- KEYS[1] <prefix>:{<q>}:periodic:<name>          HASH
-- KEYS[2] <prefix>:{<q>}:periodic:<name>:fires    LIST
-- ARGV[1] unix ms: forget only when the entry was last declared before this
-- Returns 1 forgotten, 0 kept (declared again meanwhile, or already gone).
-- Error reply "QCWRONGTYPE ..." when a key has the wrong type; nothing is written.
local err = qc_check_types(KEYS, {"hash", "list"})
if err then return err end
local declared = redis.call("HGET", KEYS[1], "declared")
if declared == false then
    return 0
end
if tonumber(declared) < tonumber(ARGV[1]) then
    redis.call("DEL", KEYS[1], KEYS[2])
    return 1
end
return 0
