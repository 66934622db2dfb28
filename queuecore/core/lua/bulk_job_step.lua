-- bulk_job_step: a bulk job's driver takes or renews the job's lease and records its progress in one
-- step; a driver that does not hold the lease (another's runs) writes nothing.
--
-- KEYS[1] <prefix>:{/}:bulk:<id>          HASH  the job: "status", "holder", "lease_until" (unix ms),
--                                               "cancel" ("1" when an operator asked it to stop), counts
-- KEYS[2] <prefix>:{/}:bulk:open          ZSET  ids of the queued and running jobs
-- KEYS[3] <prefix>:{/}:bulk:<id>:targets  LIST  "<queue> <task id>" of the tasks the job found
-- ARGV[1] job id
-- ARGV[2] holder (the driver's id)
-- ARGV[3] now, unix ms
-- ARGV[4] lease until, unix ms; 0 = give the lease up after this step
-- ARGV[5] "1": the job finished: it leaves the open set, its targets are deleted and its record
--         expires after ARGV[6] ms; "0": it goes on
-- ARGV[6] the finished record's time to live, ms
-- ARGV[7] "1": empty the targets list before pushing (a driver finding again from the start)
-- ARGV[8] n: how many field, value pairs follow
-- ARGV[9 .. 8+2n] field, value pairs to set
-- ARGV[9+2n ..] targets to push at the end of the list
-- Returns {held (1/0), cancel requested (1/0)}; held is 0, and nothing is written, when the job is
-- finished or missing, or another holder's lease runs.
-- Error reply "QCWRONGTYPE ..." when a key has the wrong type; checked before any write.
--
-- Works at maxmemory (a bulk delete makes room): the first write, an HDEL, never grows memory, so
-- Redis lets the writes after it through.
local err = qc_check_types(KEYS, {"hash", "zset", "list"}) if err then return err end
local job = redis.call("HMGET", KEYS[1], "status", "holder", "lease_until", "cancel")
local cancel = job[4] == "1" and 1 or 0
if job[1] ~= "queued" and job[1] ~= "running" then
    return {0, cancel}
end
local now = tonumber(ARGV[3])
if job[2] and job[2] ~= "" and job[2] ~= ARGV[2] and tonumber(job[3] or "0") > now then
    return {0, cancel}
end
redis.call("HDEL", KEYS[1], "holder")
local n = tonumber(ARGV[8])
local fields = {"holder", ARGV[2], "lease_until", ARGV[4]}
for i = 9, 8 + 2 * n do
    fields[#fields + 1] = ARGV[i]
end
redis.call("HSET", KEYS[1], unpack(fields))
if ARGV[7] == "1" then
    redis.call("DEL", KEYS[3])
end
local first = 9 + 2 * n
local i = first
while i <= #ARGV do
    local last = math.min(i + 999, #ARGV)
    redis.call("RPUSH", KEYS[3], unpack(ARGV, i, last))
    i = last + 1
end
if ARGV[4] == "0" then
    redis.call("HSET", KEYS[1], "holder", "")
end
if ARGV[5] == "1" then
    redis.call("ZREM", KEYS[2], ARGV[1])
    redis.call("DEL", KEYS[3])
    redis.call("PEXPIRE", KEYS[1], ARGV[6])
end
return {1, cancel}
