package redislease

// The lease's value in its key is "id:token": id, random, names this lease,
// token its fencing token.

// grantScript takes the key if it is free: it counts the next token and
// writes the key with its expiry in one atomic step, so no holder can have
// a token without the key or the key without a token. A key that holds
// this lease's id already (a grant whose answer was lost) has its expiry
// set again. It returns {1, token} when the key is this lease's, or {0,
// the key's PTTL}.
//
// The token is the counter plus one or the server's clock in
// microseconds, whichever is larger, and the counter keeps it. So a token
// is larger than every token counted before it on the same counter; larger
// than every token counted before a counter was erased with the data
// (FLUSHALL, a primary restarted without persistence), since those were
// counted at earlier times; and, where a failover left two primaries that
// each counted on their own copy of the counter, the later grant has the
// larger token. This assumes that the servers' clocks agree to within the
// time between two grants of the key (the README's "The token"). Tokens
// stay below 2^53, so the script's Lua numbers hold them exactly; they are
// written with %d, since Lua's own conversion of such a number to a string
// uses an exponent.
//
// The claim (KEYS[3]) holds the value of the last lease granted, with the
// same expiry as the key, and every script that writes the key writes it
// too: a grant waits while another lease's claim lives. So a key deleted
// by itself (an operator's DEL or UNLINK) is not granted to another before
// its holder's claim runs out, a TTL after its last renewal at the most,
// or its holder, which the deletion loses at once, releases it; without
// the claim, the deletion freed the key for a waiter in the same instant
// as it told the holder, a race the holder lost now and then. What erases
// the claim with the key (FLUSHALL, a restart without persistence) still
// frees the key at once.
//
// Every branch that writes the key reads it last: on a session's command
// connection, whose reads are tracked (CLIENT TRACKING ... NOLOOP), the
// script's own write ends the key's tracking without a push, and that
// read begins it again in the same atomic step, so no change of the key
// after the script goes unpushed.
//
// TIME, GET and INCR run before the first write, and call names a command
// the user's ACL refuses: a user without TIME or GET is refused before any
// write, and one without SET or PEXPIRE after INCR counted a token that no
// grant uses, which keeps tokens growing all the same.
//
// KEYS[1] the key, KEYS[2] its token counter, KEYS[3] its claim; ARGV[1]
// the id, ARGV[2] the TTL in milliseconds.
const grantScript = `
local function call(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    if string.find(r.err, "can't run this command", 1, true) then
      r.err = 'NOPERM this user may not run ' .. string.upper((...)) .. ' in the grant script (' .. r.err .. ')'
    end
    error(r)
  end
  return r
end
local function ours(v)
  local p = string.find(v, ':', 1, true)
  return p and string.sub(v, 1, p - 1) == ARGV[1], p
end
local now = call('TIME')
local v = call('GET', KEYS[1])
if v then
  local mine, p = ours(v)
  if mine then
    call('PEXPIRE', KEYS[1], ARGV[2])
    call('SET', KEYS[3], v, 'PX', ARGV[2])
    call('GET', KEYS[1])
    return {1, tonumber(string.sub(v, p + 1))}
  end
  return {0, call('PTTL', KEYS[1])}
end
local c = call('GET', KEYS[3])
if c and not ours(c) then
  return {0, call('PTTL', KEYS[3])}
end
local t = call('INCR', KEYS[2])
local clock = tonumber(now[1]) * 1000000 + tonumber(now[2])
if t < clock then
  t = clock
  call('SET', KEYS[2], string.format('%d', t))
end
v = ARGV[1] .. ':' .. string.format('%d', t)
call('SET', KEYS[1], v, 'PX', ARGV[2])
call('SET', KEYS[3], v, 'PX', ARGV[2])
call('GET', KEYS[1])
return {1, t}
`

// unlockScript deletes the key if it still holds this lease's value, and
// the claim if it is this lease's, and returns how many of the two it
// deleted: a lease lost to a deletion of its key gives its claim back,
// and a waiter need not wait for it to run out.
//
// KEYS[1] the key, KEYS[2] its claim; ARGV[1] the lease's value.
const unlockScript = `
local n = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  n = n + redis.call('DEL', KEYS[1])
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  n = n + redis.call('DEL', KEYS[2])
end
return n
`

// renewManyScript renews the keys of many leases of one session in one
// call: for each lease it returns 1, or 0 if the key is gone, or the value
// the key holds.
//
// Redis (7.0) tracks, for each read command a script runs, every key the
// script declares, not the key the command reads: so the script declares
// only the leases' keys, and reads them all with one MGET, which tracks
// them again (the script's own writes ended their tracking without a push,
// NOLOOP), in the same atomic step; a read a lease would cost every
// declared key each. A renewal is then two calls a lease, and one MGET a
// call: PEXPIRE with GT, which never gives an expiry to a key without one
// (an operator's SET) and never shortens one, before the comparison, and
// the claim's SET if the key is the lease's. Where the key is another
// lease's (this one was lost an instant before, by its deadline or a
// push), its expiry may be lengthened to this lease's TTL, never
// shortened, which keeps that holder safe. Redis before 7.0 has no GT:
// there the script reads the keys first and writes only its own.
//
// KEYS the leases' keys; ARGV[3i-2] the i-th lease's claim, ARGV[3i-1] its
// value, ARGV[3i] its TTL in milliseconds.
const renewManyScript = `
local gt = (redis.REDIS_VERSION_NUM or 0) >= 0x070000
if gt then
  for i = 1, #KEYS do
    redis.call('PEXPIRE', KEYS[i], ARGV[3 * i], 'GT')
  end
end
local vs = redis.call('MGET', unpack(KEYS))
local r = {}
for i = 1, #KEYS do
  local v = vs[i]
  if v == ARGV[3 * i - 1] then
    if not gt then
      redis.call('PEXPIRE', KEYS[i], ARGV[3 * i])
    end
    redis.call('SET', ARGV[3 * i - 2], v, 'PX', ARGV[3 * i])
    r[i] = 1
  elseif v then
    r[i] = v
  else
    r[i] = 0
  end
end
if not gt then
  redis.call('MGET', unpack(KEYS))
end
return r
`

// trackScript reads many keys with one MGET, which tracks every one of
// them on the session's command connection (see renewManyScript), and
// returns their values, 0 for a key that is gone. expiryScript returns the
// PTTL of each key it is given, as arguments: declared, each PTTL would
// track every declared key again. A check sends trackScript, then
// expiryScript, in one write: tracked first, so that a change after the
// read is pushed.
const (
	trackScript = `
local vs = redis.call('MGET', unpack(KEYS))
for i = 1, #KEYS do
  if not vs[i] then vs[i] = 0 end
end
return vs
`
	expiryScript = `
local r = {}
for i = 1, #ARGV do
  r[i] = redis.call('PTTL', ARGV[i])
end
return r
`
)

// releaseScript deletes each key it is given that holds a value of the
// lease ARGV[1] ("id:token" for any token): what a Lock gives back when a
// grant's answer did not come, came too late, or was not a grant.
const releaseScript = `
local n = 0
for _, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  if v and string.sub(v, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. ':' then
    n = n + redis.call('DEL', k)
  end
end
return n
`
