/*-------------------------------------------------------------------------
 *
 * scripts.c
 *		The Lua scripts of Redis locks and semaphores, and the SHA-1
 *		digests of every script redislock runs in Redis (stock's are in
 *		stockscripts.c).
 *
 * Every compare-and-act step runs as one script so that Redis executes it
 * atomically.  User data never becomes Lua source: keys travel as KEYS and
 * values as ARGV.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"


#include "scripts.h"

/*
 * How long, in ms, the waiter that a release woke keeps the lock for itself
 * while it comes to take it (HANDOFF below)
 */
#define HANDOFF_MS 100

/*
 * Wake the first waiter of a lock that still listens, after the lock was
 * deleted: pop wake channels from the front of the waiters' queue and
 * announce on each until one reached a subscriber (a waiter that gave up,
 * or died, listens no more), popping a few at most.  Sharded pub/sub
 * (SPUBLISH, Redis 7) serves a Cluster on the key's node; a server without
 * it is announced to with PUBLISH, which its waiters then subscribed to.
 * Everything goes through redis.pcall: an announcement that fails (an ACL
 * that denies a channel, say) never undoes the release before it, and the
 * waiters poll.  One waiter is woken per release, so that waiters do not
 * all race for a lock that only one can take.
 *
 * The waiter woken is named in the handoff key for HANDOFF_MS, during
 * which our acquire refuses the free lock to everyone else: a session
 * that has just released the lock and comes straight back for it, as a
 * busy session does, would otherwise take it before the waiter has woken,
 * over and over, and the queue would not be served in order.  A woken
 * waiter that takes the lock deletes the key, one that gives up hands it
 * on to the next, and one that died holds up our acquires for HANDOFF_MS
 * at most.  Other clients do not read the key, and are not held up.
 *
 * The queue and the handoff key, in the lock's slot, are named among the
 * arguments and not the keys.  While a Cluster migrates the slot, a script
 * whose keys are not all on the node is refused (TRYAGAIN), and a queue
 * that is mostly absent would hold up nearly every release and acquire;
 * undeclared, they are reached where they are, and where they are not the
 * pcall fails softly.
 */
#define ANNOUNCE_RELEASE \
	"local function announce(waiters, handoff)\n" \
	"  for i = 1, 8 do\n" \
	"    local channel = redis.pcall('LPOP', waiters)\n" \
	"    if type(channel) ~= 'string' then\n" \
	"      return\n" \
	"    end\n" \
	"    local heard = redis.pcall('SPUBLISH', channel, 'released')\n" \
	"    if type(heard) ~= 'number' then\n" \
	"      heard = redis.pcall('PUBLISH', channel, 'released')\n" \
	"    end\n" \
	"    if type(heard) == 'number' and heard > 0 then\n" \
	"      redis.pcall('SET', handoff, channel, 'PX', " CppAsString2(HANDOFF_MS) ")\n" \
	"      return\n" \
	"    end\n" \
	"  end\n" \
	"end\n"

/*
 * Queue a waiter that was refused, by the wake channel it listens on, once:
 * at the back of the waiters' queue, or at the front when a release woke
 * it and it lost the race again (front).  The queue lives as long as the
 * holder's lease (pttl) and the waiter's ttl together; waiters that still
 * wait queue themselves again at each attempt.
 */
#define QUEUE_WAITER \
	"local function queue_waiter(waiters, channel, front, pttl, ttl)\n" \
	"  if redis.pcall('LPOS', waiters, channel) then\n" \
	"    return\n" \
	"  end\n" \
	"  redis.pcall(front and 'LPUSH' or 'RPUSH', waiters, channel)\n" \
	"  local keep = math.min(pttl, 2147483647 - ttl) + ttl\n" \
	"  local left = redis.pcall('PTTL', waiters)\n" \
	"  if type(left) == 'number' and left < keep then\n" \
	"    redis.pcall('PEXPIRE', waiters, keep)\n" \
	"  end\n" \
	"end\n"

/* The wake channel of the waiter that a release woke, or nil */
#define WOKEN_WAITER \
	"local function woken_waiter(handoff)\n" \
	"  local channel = redis.pcall('GET', handoff)\n" \
	"  return type(channel) == 'string' and channel or nil\n" \
	"end\n"

/*
 * Redis' clock in ms, which scores the members of sorted sets that stand
 * for holds (a semaphore's permits, a lock's readers): the holders'
 * clocks may disagree, Redis' is one.
 */
#define NOW_MS \
	"local function now_ms()\n" \
	"  local t = redis.call('TIME')\n" \
	"  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n" \
	"end\n"

/*
 * Remove a lock's readers whose lease has ended (LOCK_READERS), once sure
 * that the sorted set at the key is a lock's readers (owner tokens,
 * "pg:...", without the "_<number>" of a permit) and not a semaphore's,
 * whose permits, scored by when they were taken, would all look expired:
 * such a key is refused, and left alone, as a key of another type.
 */
#define EXPIRE_READERS \
	NOW_MS \
	"local function expire_readers(key)\n" \
	"  local first = redis.call('ZRANGE', key, 0, 0)[1]\n" \
	"  if first and (string.sub(first, 1, 3) ~= 'pg:' or string.find(first, '_%d+$')) then\n" \
	"    error(redis.error_reply('WRONGTYPE the key holds a semaphore, not a lock'))\n" \
	"  end\n" \
	"  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now_ms()))\n" \
	"end\n"

/*
 * The steps of taking one lock, which the acquire of one lock and the
 * acquire of a set share, once the script has read the lock's value
 * (holder), its last fencing token (last), and, when the lock is free and
 * the caller named the handoff key, the waiter woken (woken).  A lock may
 * be taken when it is free (as SET NX PX would: nothing can come between
 * the check and the SET of a script), or renewed when it already carries
 * our token, which happens when an earlier command's outcome was unknown;
 * and its fencing token is drawn in the same step.
 *
 * holder_of(): who holds the lock against an exclusive acquire: the value
 * of its string key; or, while it is held in shared mode (a sorted set of
 * readers, LOCK_READERS), a live reader other than us, nil when we are
 * the only one: grant()'s SET then turns the readers' set into our lock
 * (an upgrade).  A key of another type is an error.
 *
 * may_take(): a free lock that a release has handed to a woken waiter
 * (ANNOUNCE_RELEASE) is refused to everyone but that waiter (channel)
 * until it comes or the handoff ends.
 *
 * refusal() answers a refusal with -1 - (2 * PTTL + foreign): the holder's
 * remaining lease, or the handoff's, which bounds how long a waiter that
 * polls sleeps (2^31 - 1 when the lock has no lease), and whether the
 * holder's value is not an owner token of ours (foreign = 1), whose
 * release nobody announces.  A waiter that listens on a wake channel names
 * it, and is queued (QUEUE_WAITER).
 *
 * The token is Redis' clock in microseconds (clock(), read once per
 * script), or one more than the last token when that is not smaller
 * (next_token()), and it is kept beside the lock only as long as the
 * lease; successive holders get increasing tokens as long as Redis' clock
 * does not go back by more than a lease.  Tokens are compared and
 * incremented as digit strings, never through Lua's doubles, so they stay
 * exact, and bad_token() answers an error reply unless the last one leaves
 * room for its successor below 2^63.  Each script checks everything that
 * can fail before it writes anything, and grant() writes the lock last, by
 * the command that has just written the token: an error reply leaves no
 * lock behind, at most a token drawn for nobody, which is harmless since
 * tokens only have to grow.  A waiter that is granted the lock leaves the
 * queue, so that no release wakes a waiter that waits no more, and ends
 * the handoff to it.
 */
#define TAKE_LOCK \
	QUEUE_WAITER \
	EXPIRE_READERS \
	"local function holder_of(lock, owner)\n" \
	"  local value = redis.pcall('GET', lock)\n" \
	"  if type(value) ~= 'table' then\n" \
	"    return value or nil\n" \
	"  end\n" \
	"  expire_readers(lock)\n" \
	"  for _, reader in ipairs(redis.call('ZRANGE', lock, 0, 1)) do\n" \
	"    if reader ~= owner then\n" \
	"      return reader\n" \
	"    end\n" \
	"  end\n" \
	"  return nil\n" \
	"end\n" \
	"local function may_take(holder, woken, owner, channel)\n" \
	"  return not ((holder and holder ~= owner) or (woken and woken ~= channel))\n" \
	"end\n" \
	"local function refusal(lock, holder, ttl, waiters, handoff, channel, front)\n" \
	"  local pttl = holder and redis.call('PTTL', lock) or redis.pcall('PTTL', handoff)\n" \
	"  if type(pttl) ~= 'number' or pttl < 0 then\n" \
	"    pttl = 2147483647\n" \
	"  end\n" \
	"  if channel then\n" \
	"    queue_waiter(waiters, channel, front, pttl, ttl)\n" \
	"  end\n" \
	"  local foreign = holder and string.sub(holder, 1, 3) ~= 'pg:' and 1 or 0\n" \
	"  return -1 - (2 * pttl + foreign)\n" \
	"end\n" \
	"local function bad_token(last)\n" \
	"  if last and not (string.match(last, '^[1-9]%d*$') and\n" \
	"                   (#last < 19 or (#last == 19 and last < '9223372036854775807'))) then\n" \
	"    return redis.error_reply('NOTINT fencing token key does not hold a positive integer below 2^63-1')\n" \
	"  end\n" \
	"end\n" \
	"local function clock()\n" \
	"  local now = redis.call('TIME')\n" \
	"  return now[1] .. string.sub('00000' .. now[2], -6)\n" \
	"end\n" \
	"local function next_token(last, now)\n" \
	"  if not last or #last < #now or (#last == #now and last < now) then\n" \
	"    return now\n" \
	"  end\n" \
	"  local stem, nines = string.match('0' .. last, '^(.-)(9*)$')\n" \
	"  local digit = string.byte(stem, -1) - string.byte('0') + 1\n" \
	"  local token = string.sub(stem, 1, -2) .. digit .. string.rep('0', #nines)\n" \
	"  return (string.match(token, '^0?(.*)$'))\n" \
	"end\n" \
	"local function grant(lock, fence, owner, ttl, token, waiters, handoff, channel, woken)\n" \
	"  if channel then\n" \
	"    redis.pcall('LREM', waiters, 0, channel)\n" \
	"  end\n" \
	"  if woken then\n" \
	"    redis.pcall('DEL', handoff)\n" \
	"  end\n" \
	"  redis.call('SET', fence, token, 'PX', ttl)\n" \
	"  redis.call('SET', lock, owner, 'PX', ttl)\n" \
	"end\n"

/*
 * Take one lock (TAKE_LOCK), or say why not.  The handoff key is read only
 * when the lock is free, and the last token only when the lock may be
 * taken.  Returns the fencing token (a string) when taken, else the
 * refusal's number.
 * KEYS: lock, fencing token.  ARGV: owner token, ttl in ms[, waiters,
 * handoff[, wake channel[, "front"]]].
 */
RedisScript acquire_script = {
	"acquire",
	WOKEN_WAITER
	TAKE_LOCK
	"local holder = holder_of(KEYS[1], ARGV[1])\n"
	"local woken = not holder and ARGV[4] and woken_waiter(ARGV[4])\n"
	"if not may_take(holder, woken, ARGV[1], ARGV[5]) then\n"
	"  return refusal(KEYS[1], holder, ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6] == 'front')\n"
	"end\n"
	"local last = redis.call('GET', KEYS[2])\n"
	"local err = bad_token(last)\n"
	"if err then\n"
	"  return err\n"
	"end\n"
	"local token = next_token(last, clock())\n"
	"grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], token, ARGV[3], ARGV[4], ARGV[5], woken)\n"
	"return token\n"
};

/*
 * Take every lock of a set, each as the acquire script takes one
 * (TAKE_LOCK), or none: every lock and its last token are checked before
 * anything is written, so a set that cannot be taken whole leaves nothing
 * behind, not even a token drawn.  A set attempt never waits, so it never
 * queues: the wait is for one lock, by the acquire script.  Answers an
 * array, an answer per lock in the order of the keys: every lock's token
 * when all are taken; otherwise the refusal's number, or the error reply,
 * of the first lock that could not be taken (as the acquire of that lock
 * alone would fail), and false (nil) for the others.
 *
 * What a script costs Redis is mostly the commands it calls, each several
 * times what the command itself does, and the Lua tables it grows, each
 * reallocated at every power of two.  So the set is read in one MGET of
 * the locks and their last tokens and one of the handoff keys, and one
 * EXISTS of the locks and tokens tells, by their count, whether every one
 * that MGET found unset is missing, and none a key of another type (a
 * lock's readers, say); the tokens drawn then take the place of the
 * values read, in a table that need not grow, and a nil after them ends
 * the answer there.  When some key is of another type, every lock is read
 * as the acquire script reads it (read_each()): its handoff key only when
 * it is free, its last token only when it may be taken, and a key that
 * cannot be a lock (a semaphore's) is that lock's error, which pcall()
 * gives as a string.  A handoff key that cannot be read (a Cluster slot
 * migration took it elsewhere) names no woken waiter, as for the acquire
 * of one lock.  The clock is read once for the set.
 * KEYS: lock, fencing token, for each lock.  ARGV: owner token, ttl in ms,
 * then the handoff key of each lock.
 */
RedisScript acquire_set_script = {
	"acquire_set",
	WOKEN_WAITER
	TAKE_LOCK
	"local n = #KEYS / 2\n"
	"local function only(i, answer)\n"
	"  local answers = {}\n"
	"  for j = 1, n do\n"
	"    answers[j] = false\n"
	"  end\n"
	"  answers[i] = answer\n"
	"  return answers\n"
	"end\n"
	"local function read_each(values, handoffs)\n"
	"  for i = 1, n do\n"
	"    local read, holder = pcall(holder_of, KEYS[2 * i - 1], ARGV[1])\n"
	"    if not read then\n"
	"      holder = redis.error_reply(holder)\n"
	"    end\n"
	"    local woken = read and not holder and woken_waiter(ARGV[2 + i])\n"
	"    values[2 * i - 1], handoffs[i] = holder or false, woken or false\n"
	"    values[2 * i] = read and may_take(holder, woken, ARGV[1]) and redis.pcall('GET', KEYS[2 * i])\n"
	"  end\n"
	"end\n"
	"local values = redis.call('MGET', unpack(KEYS))\n"
	"local handoffs = redis.pcall('MGET', unpack(ARGV, 3))\n"
	"if handoffs.err then\n"
	"  handoffs = {}\n"
	"end\n"
	"local set = 0\n"
	"for i = 1, 2 * n do\n"
	"  set = values[i] and set + 1 or set\n"
	"end\n"
	"if set < 2 * n and redis.call('EXISTS', unpack(KEYS)) > set then\n"
	"  read_each(values, handoffs)\n"
	"end\n"
	"for i = 1, n do\n"
	"  local holder, last = values[2 * i - 1] or nil, values[2 * i]\n"
	"  if type(holder) == 'table' then\n"
	"    return only(i, holder)\n"
	"  end\n"
	"  if not may_take(holder, not holder and handoffs[i], ARGV[1]) then\n"
	"    return only(i, refusal(KEYS[2 * i - 1], holder, ARGV[2], nil, ARGV[2 + i]))\n"
	"  end\n"
	"  local err = type(last) == 'table' and last or bad_token(last)\n"
	"  if err then\n"
	"    return only(i, err)\n"
	"  end\n"
	"end\n"
	"local now = clock()\n"
	"for i = 1, n do\n"
	"  local woken = not values[2 * i - 1] and handoffs[i]\n"
	"  values[i] = next_token(values[2 * i], now)\n"
	"  grant(KEYS[2 * i - 1], KEYS[2 * i], ARGV[1], ARGV[2], values[i], nil, ARGV[2 + i], nil, woken)\n"
	"end\n"
	"values[n + 1] = nil\n"
	"return values\n"
};

/*
 * Release one lock, which the release of one lock and the release of a
 * set share: delete the lock only if it is still ours, and wake its first
 * waiter (ANNOUNCE_RELEASE).  Returns 1 when deleted, 0 when not (readers
 * hold it, for one), or the error reply of a command that failed, so that
 * a script that releases several locks answers for each.
 *
 * A backend that waits no more for the lock (its wait gave up, or it holds
 * the lock) names its wake channel (leaving), and leaves the queue.  A
 * release may have popped it already and announced itself to it, and then
 * it took nothing here: when the lock is still free and handed to this
 * backend or to nobody, the next waiter is woken in its stead, so that
 * nobody sleeps behind a waiter that left.  That is also how a Redlock
 * waiter that a quorum granted ends what a master that refused it still
 * kept for it.
 */
#define RELEASE_LOCK \
	ANNOUNCE_RELEASE \
	WOKEN_WAITER \
	"local function release(lock, owner, waiters, handoff, leaving)\n" \
	"  local popped = leaving and redis.pcall('LREM', waiters, 0, leaving) == 0\n" \
	"  local holder = redis.pcall('GET', lock)\n" \
	"  if type(holder) == 'table' then\n" \
	"    return string.find(holder.err, 'WRONGTYPE', 1, true) and 0 or holder\n" \
	"  end\n" \
	"  if holder ~= owner then\n" \
	"    if popped and not holder then\n" \
	"      local woken = woken_waiter(handoff)\n" \
	"      if woken == leaving then\n" \
	"        redis.pcall('DEL', handoff)\n" \
	"      end\n" \
	"      if not woken or woken == leaving then\n" \
	"        announce(waiters, handoff)\n" \
	"      end\n" \
	"    end\n" \
	"    return 0\n" \
	"  end\n" \
	"  local deleted = redis.pcall('DEL', lock)\n" \
	"  if type(deleted) == 'table' then\n" \
	"    return deleted\n" \
	"  end\n" \
	"  if waiters then\n" \
	"    announce(waiters, handoff)\n" \
	"  end\n" \
	"  return 1\n" \
	"end\n"

/*
 * Release one lock (RELEASE_LOCK).
 * KEYS: lock.  ARGV: owner token[, waiters, handoff[, wake channel of the
 * releasing backend]].
 */
RedisScript release_script = {
	"release",
	RELEASE_LOCK
	"return release(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])\n"
};

/*
 * Release several locks, each as the release script releases one
 * (RELEASE_LOCK), whatever became of the others, and answer an array: 1,
 * 0 or an error reply for each, in the order of the keys, or one answer
 * for all of them.  As in the acquire of a set, commands and growing
 * tables are what a script pays for: the locks are read in one MGET (a
 * key of another type reads as nil, not ours, as its GET's WRONGTYPE
 * says); when all are ours, as they nearly always are, they are deleted
 * in one DEL, one EXISTS of their waiters' queues and handoff keys spares
 * the announcements when nobody waits, and one 1 (or DEL's error) answers
 * for all.  Otherwise, or when the releasing backend leaves the queues,
 * which decides each lock's wake-up, each lock is released as the release
 * script releases it, and answers in the table that MGET filled.
 * KEYS: the locks.  ARGV: owner token, then for each lock its waiters and
 * handoff keys, and, when one of the locks has one, the wake channel of
 * the releasing backend ('' for none).
 */
RedisScript release_set_script = {
	"release_set",
	RELEASE_LOCK
	"local stride = (#ARGV - 1) / #KEYS\n"
	"local answers = stride == 2 and redis.call('MGET', unpack(KEYS)) or {}\n"
	"local ours = 0\n"
	"for i = 1, #answers do\n"
	"  ours = answers[i] == ARGV[1] and ours + 1 or ours\n"
	"end\n"
	"if ours < #KEYS then\n"
	"  for i = 1, #KEYS do\n"
	"    local arg = stride * (i - 1) + 1\n"
	"    local leaving = stride == 3 and ARGV[arg + 3] ~= '' and ARGV[arg + 3] or nil\n"
	"    answers[i] = release(KEYS[i], ARGV[1], ARGV[arg + 1], ARGV[arg + 2], leaving)\n"
	"  end\n"
	"  return answers\n"
	"end\n"
	"local deleted = redis.pcall('DEL', unpack(KEYS))\n"
	"if type(deleted) == 'table' then\n"
	"  return deleted\n"
	"end\n"
	"if redis.pcall('EXISTS', unpack(ARGV, 2)) ~= 0 then\n"
	"  for i = 1, #KEYS do\n"
	"    announce(ARGV[2 * i], ARGV[2 * i + 1])\n"
	"  end\n"
	"end\n"
	"return 1\n"
};

/*
 * Undo an acquire that too few replicas acknowledged: delete the lock and
 * its fencing token only if the lock is ours, in one command, so that the
 * lock cannot stay behind a failure; and wake its first waiter.  Returns 1
 * when deleted.
 * KEYS: lock, fencing token.  ARGV: owner token, waiters, handoff.
 */
RedisScript abandon_script = {
	"abandon",
	ANNOUNCE_RELEASE
	"if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then\n"
	"  return 0\n"
	"end\n"
	"redis.call('DEL', KEYS[1], KEYS[2])\n"
	"announce(ARGV[2], ARGV[3])\n"
	"return 1\n"
};

/*
 * Reset the lease of the lock, and of its fencing token, only if the lock
 * is still ours.  Returns 1 when renewed.  The token's lease goes first: if
 * the lock's then failed, the token would only outlive the lock by a lease.
 *
 * One owner token serves every hold of a backend on a server, so the token
 * alone cannot tell one hold from the next: a renewal that the lease
 * watchdog sent for a hold could reach Redis after the backend released
 * it and took the lock again, with a shorter ttl, and stretch the new
 * hold to the old one's.  The watchdog names the fencing token of the
 * hold it renews, which each grant draws anew, and a renewal finds the
 * lock ours only while the token is still that one (or gone, as after an
 * eviction).  The lock's value, which other clients see, stays the owner
 * token.
 * KEYS: lock, fencing token.  ARGV: owner token, ttl in ms[, fencing token
 * of the hold].
 */
RedisScript extend_script = {
	"extend",
	"if redis.pcall('GET', KEYS[1]) == ARGV[1] then\n"
	"  local fence = ARGV[3] and redis.call('GET', KEYS[2])\n"
	"  if fence and fence ~= ARGV[3] then\n"
	"    return 0\n"
	"  end\n"
	"  redis.call('PEXPIRE', KEYS[2], ARGV[2])\n"
	"  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"end\n"
	"return 0\n"
};

/*
 * The members of a semaphore that stand for a backend's permits numbered
 * first to first + count - 1 ("<owner token>_<number>", redis-semaphore's
 * layout), passed to f in lists of at most 1000, which unpack() takes
 * whole into a command's arguments.  One permit, the common case, is named
 * directly where it is written or removed: the tables and the closure
 * would cost Redis more than the commands.
 */
#define PERMIT_MEMBERS \
	"local function permit_members(token, first, count, f)\n" \
	"  local chunk = {}\n" \
	"  for i = first, first + count - 1 do\n" \
	"    chunk[#chunk + 1] = token .. '_' .. i\n" \
	"    if #chunk == 1000 then\n" \
	"      f(chunk)\n" \
	"      chunk = {}\n" \
	"    end\n" \
	"  end\n" \
	"  if #chunk > 0 then\n" \
	"    f(chunk)\n" \
	"  end\n" \
	"end\n"

/*
 * Make a sorted set of holds live ttl ms at least, as long as the longest
 * lease of its members: one that had no live member before (fresh) gets
 * ttl, without a look at its expiry.
 */
#define KEEP_KEY \
	"local function keep_key(key, ttl, fresh)\n" \
	"  if fresh or redis.call('PTTL', key) < ttl then\n" \
	"    redis.call('PEXPIRE', key, ttl)\n" \
	"  end\n" \
	"end\n"

/*
 * Redis' clock in ms, the score of a permit taken or renewed now, and the
 * expiry of the permits older than a lease of ttl ms, which their holders
 * did not renew: redis-semaphore's reckoning, on Redis' clock instead of
 * the client's.
 */
#define PERMIT_CLOCK \
	NOW_MS \
	KEEP_KEY \
	"local function expire_permits(key, ttl)\n" \
	"  local now = now_ms()\n" \
	"  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - ttl))\n" \
	"  return now\n" \
	"end\n" \
	"local function stamp_permits(key, token, first, count, now, flag)\n" \
	"  local score = string.format('%d', now)\n" \
	"  if count == 1 and not flag then\n" \
	"    redis.call('ZADD', key, score, token .. '_' .. first)\n" \
	"    return\n" \
	"  end\n" \
	"  permit_members(token, first, count, function(members)\n" \
	"    local args = {}\n" \
	"    for _, member in ipairs(members) do\n" \
	"      args[#args + 1] = score\n" \
	"      args[#args + 1] = member\n" \
	"    end\n" \
	"    if flag then\n" \
	"      redis.call('ZADD', key, flag, unpack(args))\n" \
	"    else\n" \
	"      redis.call('ZADD', key, unpack(args))\n" \
	"    end\n" \
	"  end)\n" \
	"end\n" \
	"local function missing_permits(key, token, first, count)\n" \
	"  local missing = 0\n" \
	"  permit_members(token, first, count, function(members)\n" \
	"    for _, score in ipairs(redis.call('ZMSCORE', key, unpack(members))) do\n" \
	"      if not score then\n" \
	"        missing = missing + 1\n" \
	"      end\n" \
	"    end\n" \
	"  end)\n" \
	"  return missing\n" \
	"end\n"

/*
 * Take permits of a semaphore, stored as redis-semaphore stores its
 * Semaphore and MultiSemaphore, so that both count the same permits: a
 * sorted set at the key, one member a permit, scored by the time it was
 * taken or renewed; the permits older than the lease are expired first.
 * A backend holds the members "<owner token>_0" up to "<owner
 * token>_<permits - 1>"; an attempt asks for the next ones, from the
 * number of permits held already, and scores those held anew with them,
 * so that all share one lease.  The asked ones already there (an earlier
 * attempt whose outcome was unknown) are ours, and count against the
 * limit only once.  As for a lock, permits that a release has handed to
 * a woken waiter are refused to everyone else until it comes (our
 * waiters are served in the order they came; redis-semaphore's clients
 * do not look); a grant that leaves permits free wakes the next waiter,
 * for it may fit too.  A refusal queues a waiter that listens
 * (QUEUE_WAITER) and returns -1 - (2 * ms + 1): when the oldest permit
 * expires unrenewed, or the handoff ends, which bounds how long a waiter
 * that polls sleeps, and a holder that may not announce its release.
 * KEYS: semaphore.  ARGV: limit, permits asked, owner token, permits held,
 * ttl in ms, waiters, handoff[, wake channel[, "front"]].  Returns 1 when
 * taken.
 */
RedisScript semaphore_acquire_script = {
	"semaphore_acquire",
	ANNOUNCE_RELEASE
	WOKEN_WAITER
	QUEUE_WAITER
	PERMIT_MEMBERS
	PERMIT_CLOCK
	"local limit, asked = tonumber(ARGV[1]), tonumber(ARGV[2])\n"
	"local first, ttl = tonumber(ARGV[4]), tonumber(ARGV[5])\n"
	"local now = expire_permits(KEYS[1], ttl)\n"
	"local held = redis.call('ZCARD', KEYS[1])\n"
	"local missing = held == 0 and asked or missing_permits(KEYS[1], ARGV[3], first, asked)\n"
	"local woken = missing > 0 and woken_waiter(ARGV[7])\n"
	"local full = held + missing > limit\n"
	"if full or (woken and woken ~= ARGV[8]) then\n"
	"  local wait = ttl\n"
	"  if full then\n"
	"    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')\n"
	"    if oldest[2] then\n"
	"      wait = math.max(tonumber(oldest[2]) + ttl - now, 0)\n"
	"    end\n"
	"  else\n"
	"    local left = redis.pcall('PTTL', ARGV[7])\n"
	"    wait = type(left) == 'number' and left >= 0 and left or 0\n"
	"  end\n"
	"  if ARGV[8] then\n"
	"    queue_waiter(ARGV[6], ARGV[8], ARGV[9] == 'front', wait, ttl)\n"
	"  end\n"
	"  return -1 - (2 * wait + 1)\n"
	"end\n"
	"if first > 0 then\n"
	"  stamp_permits(KEYS[1], ARGV[3], 0, first, now, 'XX')\n"
	"end\n"
	"stamp_permits(KEYS[1], ARGV[3], first, asked, now)\n"
	"keep_key(KEYS[1], ttl, held == 0)\n"
	"if ARGV[8] then\n"
	"  redis.pcall('LREM', ARGV[6], 0, ARGV[8])\n"
	"end\n"
	"if woken then\n"
	"  redis.pcall('DEL', ARGV[7])\n"
	"end\n"
	"if held + missing < limit then\n"
	"  announce(ARGV[6], ARGV[7])\n"
	"end\n"
	"return 1\n"
};

/*
 * Give back permits of a semaphore: the members numbered first to first +
 * count - 1 of the owner token, and wake the first waiter that still
 * listens when any was there.  Returns 1 when at least expected of them
 * were there, else 0 (they expired unrenewed).  A backend that waits no
 * more names its wake channel and leaves the queue: when a release had
 * popped it already, and permits are free for the next waiter, that one is
 * woken in its stead, as release_script does.
 * KEYS: semaphore.  ARGV: owner token, first, count, expected, limit,
 * waiters, handoff[, wake channel of the releasing backend].
 */
RedisScript semaphore_release_script = {
	"semaphore_release",
	ANNOUNCE_RELEASE
	WOKEN_WAITER
	PERMIT_MEMBERS
	"local leaving = ARGV[8]\n"
	"local popped = leaving and redis.pcall('LREM', ARGV[6], 0, leaving) == 0\n"
	"local removed = 0\n"
	"if ARGV[3] == '1' then\n"
	"  removed = redis.call('ZREM', KEYS[1], ARGV[1] .. '_' .. ARGV[2])\n"
	"else\n"
	"  permit_members(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), function(members)\n"
	"    removed = removed + redis.call('ZREM', KEYS[1], unpack(members))\n"
	"  end)\n"
	"end\n"
	"if removed > 0 then\n"
	"  announce(ARGV[6], ARGV[7])\n"
	"elseif popped and redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[5]) then\n"
	"  local woken = woken_waiter(ARGV[7])\n"
	"  if woken == leaving then\n"
	"    redis.pcall('DEL', ARGV[7])\n"
	"  end\n"
	"  if not woken or woken == leaving then\n"
	"    announce(ARGV[6], ARGV[7])\n"
	"  end\n"
	"end\n"
	"return removed >= tonumber(ARGV[4]) and 1 or 0\n"
};

/*
 * Renew the permits a backend holds of a semaphore, scoring them now, only
 * if every one of them is still there once the permits older than the
 * lease are expired: a permit that expired may have been taken by another
 * client since, and is not brought back.  Returns 1 when renewed.
 * KEYS: semaphore.  ARGV: owner token, permits held, ttl in ms.
 */
RedisScript semaphore_extend_script = {
	"semaphore_extend",
	PERMIT_MEMBERS
	PERMIT_CLOCK
	"local held, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])\n"
	"local now = expire_permits(KEYS[1], ttl)\n"
	"if missing_permits(KEYS[1], ARGV[1], 0, held) > 0 then\n"
	"  return 0\n"
	"end\n"
	"stamp_permits(KEYS[1], ARGV[1], 0, held, now, 'XX')\n"
	"keep_key(KEYS[1], ttl, false)\n"
	"return 1\n"
};

/*
 * A lock's readers: while a lock is held in shared mode its key is a
 * sorted set of the readers' owner tokens, each scored by the end of its
 * lease in ms on Redis' clock, and the key itself expires with the last
 * lease; readers whose lease ended are removed before anyone counts them.
 * So a plain SET NX locker (redis-py, redsync) finds the key taken while
 * anyone reads, and a reader finds a string key taken by its writer.  A
 * reader is renewed by scoring it anew (the key's expiry only ever moves
 * later).  lock_readers() returns the string value of a writer, or nil and
 * how many live readers there are (after expiring the others; nil when
 * the key is absent), asking the key's type first rather than reading it
 * as a string, which a reply of WRONGTYPE would make dear; an exclusive
 * acquire that finds no reader but this backend's own converts the key (an
 * upgrade).
 */
#define LOCK_READERS \
	EXPIRE_READERS \
	KEEP_KEY \
	"local function lock_readers(key)\n" \
	"  local kind = redis.call('TYPE', key).ok\n" \
	"  if kind == 'none' then\n" \
	"    return nil\n" \
	"  elseif kind == 'string' then\n" \
	"    return redis.call('GET', key)\n" \
	"  end\n" \
	"  expire_readers(key)\n" \
	"  return nil, redis.call('ZCARD', key)\n" \
	"end\n" \
	"local function read_until(key, token, ttl, fresh)\n" \
	"  redis.call('ZADD', key, string.format('%d', now_ms() + ttl), token)\n" \
	"  keep_key(key, ttl, fresh)\n" \
	"end\n"

/*
 * Take a lock in shared mode: add this backend's owner token to its
 * readers, unless a writer holds it (a string key that is not ours; ours
 * is the exclusive hold of this backend, which covers a shared one), a
 * release has handed it to a woken waiter, or, while others read, someone
 * waits in the queue ahead of this backend: so a stream of readers cannot
 * starve a writer that waits, here or elsewhere.  A reader granted wakes
 * the next waiter, which may read too: a writer's release so wakes the
 * readers queued at the front one after the other, and a writer woken so,
 * refused, keeps the front of the queue, so that readers that come later
 * wait behind it.  Refusals queue and answer as the acquire script's do.
 * KEYS: lock.  ARGV: owner token, ttl in ms, waiters, handoff[, wake
 * channel[, "front"]].  Returns 1 when taken.
 */
RedisScript shared_acquire_script = {
	"shared_acquire",
	ANNOUNCE_RELEASE
	WOKEN_WAITER
	QUEUE_WAITER
	LOCK_READERS
	"local ttl = tonumber(ARGV[2])\n"
	"local writer, readers = lock_readers(KEYS[1])\n"
	"local woken = not writer and woken_waiter(ARGV[4])\n"
	"local first = readers and readers > 0 and not woken and redis.pcall('LINDEX', ARGV[3], 0)\n"
	"local behind = type(first) == 'string' and first ~= ARGV[5]\n"
	"if (writer and writer ~= ARGV[1]) or (woken and woken ~= ARGV[5]) or behind then\n"
	"  local pttl = (writer or behind) and redis.call('PTTL', KEYS[1]) or redis.pcall('PTTL', ARGV[4])\n"
	"  if type(pttl) ~= 'number' or pttl < 0 then\n"
	"    pttl = 2147483647\n"
	"  end\n"
	"  if ARGV[5] then\n"
	"    queue_waiter(ARGV[3], ARGV[5], ARGV[6] == 'front', pttl, ttl)\n"
	"  end\n"
	"  local foreign = writer and string.sub(writer, 1, 3) ~= 'pg:' and 1 or 0\n"
	"  return -1 - (2 * pttl + foreign)\n"
	"end\n"
	"if writer then\n"
	"  if redis.call('PTTL', KEYS[1]) < ttl then\n"
	"    redis.call('PEXPIRE', KEYS[1], ttl)\n"
	"  end\n"
	"  return 1\n"
	"end\n"
	"read_until(KEYS[1], ARGV[1], ttl, not readers or readers == 0)\n"
	"if ARGV[5] then\n"
	"  redis.pcall('LREM', ARGV[3], 0, ARGV[5])\n"
	"end\n"
	"if woken then\n"
	"  redis.pcall('DEL', ARGV[4])\n"
	"end\n"
	"announce(ARGV[3], ARGV[4])\n"
	"return 1\n"
};

/*
 * End this backend's shared hold of a lock in Redis: remove its reader,
 * and wake the first waiter when it was the last.  A string key of ours is
 * this backend's exclusive hold: kept while that hold lasts (keep), else
 * deleted, as a release of it.  Returns 1 when the hold was still ours (a
 * live reader, or our string), 0 when its lease was lost.  A backend that
 * waits no more names its wake channel, as for release_script.
 * KEYS: lock.  ARGV: owner token, waiters, handoff, keep ("1" or "0")[,
 * wake channel of the releasing backend].
 */
RedisScript shared_release_script = {
	"shared_release",
	ANNOUNCE_RELEASE
	WOKEN_WAITER
	LOCK_READERS
	"local leaving = ARGV[5]\n"
	"local popped = leaving and redis.pcall('LREM', ARGV[2], 0, leaving) == 0\n"
	"local writer, readers = lock_readers(KEYS[1])\n"
	"if writer then\n"
	"  if writer ~= ARGV[1] then\n"
	"    return 0\n"
	"  end\n"
	"  if ARGV[4] ~= '1' then\n"
	"    redis.call('DEL', KEYS[1])\n"
	"    announce(ARGV[2], ARGV[3])\n"
	"  end\n"
	"  return 1\n"
	"end\n"
	"local ours = redis.call('ZREM', KEYS[1], ARGV[1])\n"
	"if readers and readers == ours then\n"
	"  announce(ARGV[2], ARGV[3])\n"
	"elseif not readers and popped then\n"
	"  local woken = woken_waiter(ARGV[3])\n"
	"  if woken == leaving then\n"
	"    redis.pcall('DEL', ARGV[3])\n"
	"  end\n"
	"  if not woken or woken == leaving then\n"
	"    announce(ARGV[2], ARGV[3])\n"
	"  end\n"
	"end\n"
	"return ours\n"
};

/*
 * Renew this backend's shared hold of a lock: score its reader anew, if it
 * is still a live reader; or, while the key is our string (this backend's
 * exclusive hold covers the shared one), make its lease last ttl at least.
 * Returns 1 when renewed.
 * KEYS: lock.  ARGV: owner token, ttl in ms.
 */
RedisScript shared_extend_script = {
	"shared_extend",
	LOCK_READERS
	"local ttl = tonumber(ARGV[2])\n"
	"local writer, readers = lock_readers(KEYS[1])\n"
	"if writer then\n"
	"  if writer ~= ARGV[1] then\n"
	"    return 0\n"
	"  end\n"
	"  if redis.call('PTTL', KEYS[1]) < ttl then\n"
	"    redis.call('PEXPIRE', KEYS[1], ttl)\n"
	"  end\n"
	"  return 1\n"
	"end\n"
	"if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then\n"
	"  return 0\n"
	"end\n"
	"read_until(KEYS[1], ARGV[1], ttl, false)\n"
	"return 1\n"
};

/*
 * The last exclusive hold of a lock ends while this backend still holds it
 * in shared mode: turn our string key into the readers' set, with us its
 * only reader for a lease of ttl, and wake the first waiter, which may
 * read too.  Returns 1 when the key was ours, else 0 (the lease was lost).
 * KEYS: lock.  ARGV: owner token, ttl in ms of the shared hold, waiters,
 * handoff.
 */
RedisScript downgrade_script = {
	"downgrade",
	ANNOUNCE_RELEASE
	LOCK_READERS
	"if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then\n"
	"  return 0\n"
	"end\n"
	"redis.call('DEL', KEYS[1])\n"
	"read_until(KEYS[1], ARGV[1], tonumber(ARGV[2]), true)\n"
	"announce(ARGV[3], ARGV[4])\n"
	"return 1\n"
};

/* Hex SHA-1 of a script body, as Redis computes it for EVALSHA */
static void
compute_sha1(RedisScript *script)
{
	uint8		digest[COMPAT_SHA1_LENGTH];
	int			i;

	compat_sha1(script->body, strlen(script->body), digest);
	for (i = 0; i < COMPAT_SHA1_LENGTH; i++)
		snprintf(script->sha1 + i * 2, 3, "%02x", digest[i]);
}

/*
 * Compute the digests, once per backend.  This runs at a backend's first
 * call rather than in _PG_init: the digest needs a resource owner, which a
 * postmaster loading shared_preload_libraries does not have.
 */
void
redislock_init_scripts(void)
{
	static bool done = false;

	if (done)
		return;
	compute_sha1(&acquire_script);
	compute_sha1(&acquire_set_script);
	compute_sha1(&release_script);
	compute_sha1(&release_set_script);
	compute_sha1(&abandon_script);
	compute_sha1(&extend_script);
	compute_sha1(&semaphore_acquire_script);
	compute_sha1(&semaphore_release_script);
	compute_sha1(&semaphore_extend_script);
	compute_sha1(&shared_acquire_script);
	compute_sha1(&shared_release_script);
	compute_sha1(&shared_extend_script);
	compute_sha1(&downgrade_script);
	compute_sha1(&stock_decr_script);
	compute_sha1(&stock_giveback_script);
	compute_sha1(&stock_set_script);
	done = true;
}
