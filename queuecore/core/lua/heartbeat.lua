-- heartbeat: write one worker process's heartbeat (what it is and what it runs), with a TTL.
--
-- KEYS[1] <prefix>:servers:{<id>}   STRING  the process's ServerInfo as JSON
-- ARGV[1] the JSON
-- ARGV[2] time to live, ms
-- Returns 1. A key of another Redis type is replaced (it is this process's own key).
--
-- Works at maxmemory, so a worker that is still working never drops out of the server list: Redis
-- refuses a script's first write when that command may grow memory (SET), but lets a script that
-- already wrote go on. The DEL comes first: it frees memory (the previous heartbeat), and the new
-- one is about the same size (bounded: a heartbeat lists at most the tasks the process holds).
redis.call("DEL", KEYS[1])
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
return 1
