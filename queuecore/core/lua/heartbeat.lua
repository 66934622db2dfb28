-- heartbeat: write one worker process's heartbeat (what it is and what it runs) and the task types
-- it handles, both with a TTL; take the command an operator left for the process, if any.
--
-- KEYS[1] <prefix>:servers:{<id>}           STRING  the process's ServerInfo as JSON
-- KEYS[2] <prefix>:servers:{<id>}:types     STRING  the task types it handles, with their parameter
--                                                   names, as JSON (registry.py, describe_registry)
-- KEYS[3] <prefix>:servers:{<id>}:control   STRING  "<command> <actor>" an operator left for the
--                                                   process (Inspector.quiet_server/stop_server)
-- ARGV[1] the ServerInfo JSON
-- ARGV[2] time to live of both, ms
-- ARGV[3] the task types JSON
-- Returns the command left in KEYS[3] (which is deleted), or "" when there is none. Keys of another
-- Redis type are replaced or dropped (they are this process's own keys).
--
-- Works at maxmemory, so a worker that is still working never drops out of the server list: Redis
-- refuses a script's first write when that command may grow memory (SET), but lets a script that
-- already wrote go on. The DEL comes first: it frees memory (the previous heartbeat), and the new
-- one is about the same size (bounded: a heartbeat lists at most the tasks the process holds, and
-- its task types change only when its code does).
local control = ""
if not qc_check_type(KEYS[3], "string") then  -- absent, or a string: taken; anything else is dropped
    control = redis.call("GET", KEYS[3]) or ""
end
redis.call("DEL", KEYS[1], KEYS[2], KEYS[3])
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
redis.call("SET", KEYS[2], ARGV[3], "PX", ARGV[2])
return control
