-- audit: record one operator action in the audit log, newest first, keeping the latest entries.
--
-- KEYS[1] <prefix>:audit   LIST  operator actions as JSON, newest first
-- ARGV[1] the entry (JSON; at most 100 task ids, so bounded)
-- ARGV[2] at most this many entries are kept (inspector.AUDIT_MAX_ENTRIES)
-- Returns 1.
-- Error reply "QCWRONGTYPE <key> holds a <type>, expected a <type>" when KEYS[1] has the wrong
-- Redis type; checked before any write, so nothing is written.
--
-- Works at maxmemory, where an operator deletes tasks to make room and the log must still say so:
-- the trim comes first, a write that never grows memory, so Redis lets the LPUSH through.
local err = qc_check_types(KEYS, {"list"}) if err then return err end
redis.call("LTRIM", KEYS[1], 0, tonumber(ARGV[2]) - 2)
redis.call("LPUSH", KEYS[1], ARGV[1])
return 1
