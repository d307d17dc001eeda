/*-------------------------------------------------------------------------
 *
 * held.c
 *		The Redis locks this backend holds or waits for: their entries, the
 *		stacking of their holds, and the owner token they carry.
 *
 * A lock is a Redis key set with SET NX PX to this backend's owner token,
 * the same shape every Redis lock client uses, so that they exclude each
 * other.  Holds stack as PostgreSQL advisory locks do: the backend keeps a
 * count of session holds and of transaction holds per subtransaction level,
 * and the Redis key is deleted when the last hold ends.
 *
 * An entry is made before Redis is asked for the lock and forgotten once
 * Redis has answered its release; what changes of it meanwhile is shown in
 * the shared lock table (locktable.c).  The locks that the current
 * transaction touched are listed apart, so that transaction ends
 * (lockend.c) cost what the transaction touched.  Here too are the parts
 * of every call on a lock (its keys, the owner token, the release) and the
 * reading of a compare-and-act script's answer, which acquiring, renewing,
 * releasing and transaction end all build on; this file calls none of
 * those.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include <hiredis/hiredis.h>

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "utils/memutils.h"

#include "lock/lock.h"
#include "scripts.h"
#include "stats.h"

HTAB	   *held_locks = NULL;
static MemoryContext locks_cxt = NULL;

/* The Redis node that serves a lock's key now, for messages */
const char *
lock_endpoint(const HeldLock *lock)
{
	return redis_key_endpoint(lock->conn, lock->tag.key, lock->tag.keylen);
}

/*
 * The locks the current transaction took holds on or may have left in
 * Redis.  Transaction and savepoint ends visit these only, so that their
 * cost does not grow with the session locks a backend holds.
 */
dlist_head	touched_locks = DLIST_STATIC_INIT(touched_locks);

static uint32
lock_tag_hash(const void *key, Size keysize)
{
	const LockTag *tag = (const LockTag *) key;

	return hash_combine(murmurhash32(tag->serverid) ^ tag->mode,
						hash_bytes((const unsigned char *) tag->key,
								   tag->keylen));
}

static int
lock_tag_compare(const void *key1, const void *key2, Size keysize)
{
	const LockTag *a = (const LockTag *) key1;
	const LockTag *b = (const LockTag *) key2;

	if (a->serverid != b->serverid || a->keylen != b->keylen ||
		a->mode != b->mode)
		return 1;
	return memcmp(a->key, b->key, a->keylen);
}

/* The table lives as long as the backend, for session locks */
static void
init_held_locks(void)
{
	HASHCTL		ctl;

	locks_cxt = AllocSetContextCreate(TopMemoryContext, "redislock locks",
									  ALLOCSET_DEFAULT_SIZES);
	ctl.keysize = sizeof(LockTag);
	ctl.entrysize = sizeof(HeldLock);
	ctl.hash = lock_tag_hash;
	ctl.match = lock_tag_compare;
	ctl.hcxt = locks_cxt;
	held_locks = hash_create("redislock held locks", 64, &ctl,
							 HASH_ELEM | HASH_FUNCTION | HASH_COMPARE |
							 HASH_CONTEXT);
}

/* This backend's entry for the lock of key rkey in mode, or NULL */
HeldLock *
find_lock(Oid serverid, const char *rkey, int rkeylen, LockMode mode)
{
	LockTag		tag;

	if (held_locks == NULL)
		init_held_locks();
	tag.serverid = serverid;
	tag.keylen = rkeylen;
	tag.key = rkey;
	tag.mode = mode;
	return (HeldLock *) hash_search(held_locks, &tag, HASH_FIND, NULL);
}

/*
 * Does this backend hold the lock in the other of the modes exclusive and
 * shared?  Its exclusive hold covers its shared one in Redis, and the end
 * of the last exclusive hold leaves the shared ones there.
 */
bool
other_mode_holds(const HeldLock *lock)
{
	HeldLock   *other;

	if (lock->mode == LOCK_MODE_SEMAPHORE)
		return false;
	other = find_lock(lock->tag.serverid, lock->tag.key, lock->tag.keylen,
					  lock->mode == LOCK_MODE_SHARED ?
					  LOCK_MODE_EXCLUSIVE : LOCK_MODE_SHARED);
	return other != NULL && total_holds(other) > 0;
}

/* The current transaction has holds or work at transaction end on lock */
void
touch_lock(HeldLock *lock)
{
	if (!lock->touched)
	{
		dlist_push_tail(&touched_locks, &lock->xact_link);
		lock->touched = true;
	}
}

void
untouch_lock(HeldLock *lock)
{
	if (lock->touched)
	{
		dlist_delete(&lock->xact_link);
		lock->touched = false;
	}
}

/*
 * An entry with no holds, made before Redis is asked, so that nothing can
 * fail between Redis granting the lock and the backend recording it.  Its
 * entry in the shared lock table is claimed first, so that a full table
 * leaves nothing behind; it shows the lock awaited for a session hold or
 * a transaction hold, as session says, and for a semaphore the permits
 * asked for (wait_permits; 0 for a lock).
 */
HeldLock *
create_lock(RedisConn *conn, const char *rkey, int rkeylen, LockMode mode,
			bool session, int wait_permits)
{
	LockTag		tag;
	HeldLock   *lock;
	bool		found;
	MemoryContext oldcxt;
	RedisLockState waiting = {0};
	LockTableRef shared;

	waiting.mode = mode;
	waiting.session = session;
	waiting.wait_permits = wait_permits;
	waiting.waiting_since = GetCurrentTimestamp();
	(void) conn_owner_token(conn);
	shared = locktable_claim(conn, rkey, rkeylen, &waiting);

	tag.serverid = conn->serverid;
	tag.keylen = rkeylen;
	tag.key = MemoryContextStrdup(locks_cxt, rkey);
	tag.mode = mode;
	lock = (HeldLock *) hash_search(held_locks, &tag, HASH_ENTER, &found);
	Assert(!found);

	lock->mode = mode;
	lock->conn = conn;
	lock->prefixlen = strlen(conn->key_prefix);
	lock->slot = redis_key_slot(rkey, rkeylen);
	oldcxt = MemoryContextSwitchTo(locks_cxt);
	lock->fence_key = redis_sibling_key(rkey, rkeylen, lock->prefixlen,
										lock->slot, REDIS_SIBLING_FENCE,
										&lock->fence_keylen);
	lock->waiters_key = redis_sibling_key(rkey, rkeylen, lock->prefixlen,
										  lock->slot, REDIS_SIBLING_WAITERS,
										  &lock->waiters_keylen);
	lock->handoff_key = redis_sibling_key(rkey, rkeylen, lock->prefixlen,
										  lock->slot, REDIS_SIBLING_HANDOFF,
										  &lock->handoff_keylen);
	MemoryContextSwitchTo(oldcxt);
	lock->wake_channel = NULL;
	lock->wake_channellen = 0;
	lock->queued = false;
	lock->wake_request = 0;
	lock->wake_worker = 0;
	lock->session_holds = 0;
	lock->xact_holds = 0;
	lock->levels = NULL;		/* allocated with the first transaction hold */
	lock->maxlevels = 0;
	lock->nlevels = 0;
	lock->permit_holds = NULL;	/* allocated with a semaphore's first hold */
	lock->npermit_holds = 0;
	lock->maxpermit_holds = 0;
	lock->permits = 0;
	lock->wait_permits = wait_permits;
	lock->permits_reserved = 0;
	lock->limit = 0;
	lock->in_redis = false;
	lock->fence = 0;
	lock->ttl_ms = 0;
	lock->acquired_at = 0;
	lock->loss_reported = false;
	lock->lease_expires_at = 0;
	lock->renew_until = 0;
	lock->waiting_since = waiting.waiting_since;
	lock->wait_session = session;
	lock->shared = shared;
	lock->touched = false;
	touch_lock(lock);
	redis_conn_pin(conn);
	return lock;
}

void
remove_lock(HeldLock *lock)
{
	char	   *key = (char *) lock->tag.key;
	RedisConn  *conn = lock->conn;

	untouch_lock(lock);
	locktable_release(lock->shared);
	pfree(lock->fence_key);
	pfree(lock->waiters_key);
	pfree(lock->handoff_key);
	if (lock->wake_channel != NULL)
		pfree(lock->wake_channel);
	if (lock->levels != NULL)
		pfree(lock->levels);
	if (lock->permit_holds != NULL)
		pfree(lock->permit_holds);
	hash_search(held_locks, &lock->tag, HASH_REMOVE, NULL);
	pfree(key);
	redis_conn_unpin(conn);
}

int
total_holds(const HeldLock *lock)
{
	return lock->session_holds + lock->xact_holds;
}

/*
 * What the shared lock table and redis_locks() show of a lock: granted or
 * awaited, its holds, its lease.
 */
void
lock_state(const HeldLock *lock, RedisLockState *state)
{
	int			i;

	state->mode = lock->mode;
	state->granted = lock->waiting_since == 0;
	state->session = lock->wait_session;
	state->session_holds = lock->session_holds;
	state->xact_holds = lock->xact_holds;
	state->session_permits = 0;
	state->xact_permits = 0;
	for (i = 0; i < lock->npermit_holds; i++)
	{
		if (lock->permit_holds[i].level == 0)
			state->session_permits += lock->permit_holds[i].permits;
		else
			state->xact_permits += lock->permit_holds[i].permits;
	}
	state->wait_permits = lock->waiting_since != 0 ? lock->wait_permits : 0;
	state->ttl_ms = lock->ttl_ms;
	state->fence = lock->fence;
	state->waiting_since = lock->waiting_since;
	state->acquired_at = lock->acquired_at;
	state->lease_expires_at = lock->lease_expires_at;
	state->renew_until = lock->renew_until;
}

/*
 * Show in the shared lock table what changed of the lock: once Redis has
 * answered, or, for holds that end at transaction end, before their
 * release is sent.
 */
void
publish_lock(const HeldLock *lock)
{
	RedisLockState state;

	if (lock->shared.index < 0)
		return;
	lock_state(lock, &state);
	locktable_publish(lock->shared, &state);
}

/*
 * The lease of a held lock was found lost: mark its entry, and count the
 * loss unless the lease watchdog found it first.
 */
void
note_lease_lost(HeldLock *lock)
{
	if (locktable_mark_lost(lock->shared))
		redis_count(lock->conn, REDIS_STAT_LEASES_LOST, 1);
}

/* The key as the user wrote it, without the server's prefix */
const char *
user_key(const HeldLock *lock)
{
	return lock->tag.key + lock->prefixlen;
}

/*
 * Note the permits of a semaphore's new hold, at level (0 for a session
 * hold)
 */
static void
add_permit_hold(HeldLock *lock, int level, int permits)
{
	if (lock->permit_holds == NULL)
	{
		lock->maxpermit_holds = 4;
		lock->permit_holds = MemoryContextAlloc(locks_cxt,
												sizeof(PermitHold) * lock->maxpermit_holds);
	}
	else if (lock->npermit_holds == lock->maxpermit_holds)
	{
		lock->maxpermit_holds *= 2;
		lock->permit_holds = repalloc(lock->permit_holds,
									  sizeof(PermitHold) * lock->maxpermit_holds);
	}
	lock->permit_holds[lock->npermit_holds].level = level;
	lock->permit_holds[lock->npermit_holds].permits = permits;
	lock->npermit_holds++;
	lock->permits += permits;
}

/* One more hold of lock, with the permits it took of a semaphore */
void
add_hold(HeldLock *lock, bool session, int permits)
{
	int			level = GetCurrentTransactionNestLevel();

	if (lock->mode == LOCK_MODE_SEMAPHORE)
		add_permit_hold(lock, session ? 0 : level, permits);
	if (session)
	{
		lock->session_holds++;
		return;
	}
	touch_lock(lock);
	if (lock->nlevels == 0 || lock->levels[lock->nlevels - 1].level != level)
	{
		if (lock->levels == NULL)
		{
			lock->maxlevels = 4;
			lock->levels = MemoryContextAlloc(locks_cxt,
											  sizeof(LevelHolds) * lock->maxlevels);
		}
		else if (lock->nlevels == lock->maxlevels)
		{
			lock->maxlevels *= 2;
			lock->levels = repalloc(lock->levels,
									sizeof(LevelHolds) * lock->maxlevels);
		}
		lock->levels[lock->nlevels].level = level;
		lock->levels[lock->nlevels].count = 0;
		lock->nlevels++;
	}
	lock->levels[lock->nlevels - 1].count++;
	lock->xact_holds++;
}

/*
 * The place in permit_holds of the hold that drop_one_hold() ends: the
 * last session hold, else the last (innermost) transaction hold
 */
static int
last_hold_to_drop(const HeldLock *lock)
{
	int			i;

	if (lock->session_holds > 0)
		for (i = lock->npermit_holds - 1; i >= 0; i--)
			if (lock->permit_holds[i].level == 0)
				return i;
	return lock->npermit_holds - 1;
}

/*
 * The permits of the hold that drop_one_hold() would end, so that Redis
 * can give them back first; 0 for a lock
 */
int
permits_of_next_drop(const HeldLock *lock)
{
	if (lock->mode != LOCK_MODE_SEMAPHORE)
		return 0;
	return lock->permit_holds[last_hold_to_drop(lock)].permits;
}

/*
 * End one hold: a session hold if there is one, as those are what explicit
 * release is for, otherwise the innermost transaction hold.
 */
void
drop_one_hold(HeldLock *lock)
{
	if (lock->mode == LOCK_MODE_SEMAPHORE)
	{
		int			i = last_hold_to_drop(lock);

		lock->permits -= lock->permit_holds[i].permits;
		lock->npermit_holds--;
		memmove(&lock->permit_holds[i], &lock->permit_holds[i + 1],
				sizeof(PermitHold) * (lock->npermit_holds - i));
	}
	if (lock->session_holds > 0)
	{
		lock->session_holds--;
		return;
	}
	Assert(lock->nlevels > 0);
	lock->xact_holds--;
	if (--lock->levels[lock->nlevels - 1].count == 0)
		lock->nlevels--;
}

/*
 * The permits of a semaphore's transaction holds at nesting level `level`
 * and deeper end (level 1: every transaction hold): forget them, and
 * return how many permits they held.  The counts of holds are the
 * caller's to change.
 */
int
drop_permit_holds(HeldLock *lock, int level)
{
	int			dropped = 0;

	while (lock->npermit_holds > 0 &&
		   lock->permit_holds[lock->npermit_holds - 1].level >= level)
		dropped += lock->permit_holds[--lock->npermit_holds].permits;
	lock->permits -= dropped;
	return dropped;
}

/* A subtransaction committed: its semaphore holds pass to the parent */
void
pass_permit_holds(HeldLock *lock, int level)
{
	int			i;

	for (i = lock->npermit_holds - 1; i >= 0; i--)
	{
		if (lock->permit_holds[i].level != level)
			break;
		lock->permit_holds[i].level = level - 1;
	}
}

/*
 * The group of locks that one script call may name with lock: its server,
 * and its group there (redis_conn_script_group()), -1 when it goes alone,
 * as a semaphore and a shared hold do, whose calls are their own, and the
 * release of an exclusive hold that leaves a shared one.  A release must
 * run even while a Cluster migrates the slot.
 */
static int
script_group(const HeldLock *lock, bool release)
{
	if (lock->mode != LOCK_MODE_EXCLUSIVE || (release && other_mode_holds(lock)))
		return -1;
	return redis_conn_script_group(lock->conn, lock->slot, release);
}

/* What the ordering of locks by group compares them by */
typedef struct GroupOrder
{
	HeldLock  **locks;
	bool		release;
} GroupOrder;

static int
script_group_cmp(const void *a, const void *b, void *arg)
{
	const GroupOrder *by = (const GroupOrder *) arg;
	const HeldLock *la = by->locks[*(const int *) a];
	const HeldLock *lb = by->locks[*(const int *) b];
	int			ga = script_group(la, by->release);
	int			gb = script_group(lb, by->release);

	if (la->conn != lb->conn)
		return (uintptr_t) la->conn < (uintptr_t) lb->conn ? -1 : 1;
	if (ga != gb)
		return ga < gb ? -1 : 1;
	return *(const int *) a - *(const int *) b;
}

/*
 * Order the n locks that order[] names (indexes into locks[]) so that
 * those that one script call may name together, to take them or to
 * release them (release), follow each other, each group in the order it
 * had.  A set of locks costs Redis a script call per group rather than
 * per lock.
 */
void
order_by_script_group(HeldLock **locks, int *order, int n, bool release)
{
	GroupOrder	by = {locks, release};

	if (n > 1)
		qsort_arg(order, n, sizeof(int), script_group_cmp, &by);
}

/*
 * How many of the n locks that order[] names, ordered by
 * order_by_script_group(), go in one script call with the first: those of
 * its group, LOCKS_PER_SCRIPT at most; 1 for a lock that goes alone.
 */
int
script_group_size(HeldLock **locks, const int *order, int n, bool release)
{
	const HeldLock *first = locks[order[0]];
	int			group = script_group(first, release);
	int			size = 1;

	if (group < 0)
		return 1;
	while (size < n && size < LOCKS_PER_SCRIPT &&
		   locks[order[size]]->conn == first->conn &&
		   script_group(locks[order[size]], release) == group)
		size++;
	return size;
}

/* Start a call on lock, in the slot of its key */
void
lock_call_init(RedisCall *call, HeldLock *lock, const RedisScript *script)
{
	redis_call_init(call, lock->conn, script);
	call->slot = lock->slot;
}

/* Add the lock's key to a call */
void
add_lock_key(RedisCall *call, const HeldLock *lock)
{
	redis_call_arg(call, lock->tag.key, lock->tag.keylen);
}

/*
 * Add the lock's key and its fencing token's key to a script call, after
 * the keys it has: a call on several locks names them lock by lock
 */
void
add_lock_keys(RedisCall *call, const HeldLock *lock)
{
	call->nkeys += 2;
	add_lock_key(call, lock);
	redis_call_arg(call, lock->fence_key, lock->fence_keylen);
}

/* What every owner token of this backend starts and ends with, made once */
static char *token_backend = NULL;
static char *token_random = NULL;

/*
 * The owner token of this backend's locks on a foreign server: random bytes
 * from pg_strong_random, so nobody can guess it, prefixed by host, port, pid
 * and the server's OID so that someone looking at the key with redis-cli can
 * tell which backend holds it.  One token serves every lock of the backend
 * on one server, as a Redisson client id serves every lock of a client; two
 * servers that lead to the same keys (one Redis, one key prefix) are two
 * owners, so that a release through one never ends a hold taken through
 * the other.  Palloc'd in the current memory context.
 */
static char *
backend_owner_token(Oid serverid)
{
	if (token_random == NULL)
	{
		uint8		random_bytes[16];
		char		hex[sizeof(random_bytes) * 2 + 1];
		char		hostname[256];
		int			i;

		if (!pg_strong_random(random_bytes, sizeof(random_bytes)))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate a random Redis lock owner token")));
		for (i = 0; i < (int) sizeof(random_bytes); i++)
			snprintf(hex + i * 2, 3, "%02x", random_bytes[i]);

		if (gethostname(hostname, sizeof(hostname)) != 0)
			strlcpy(hostname, "unknown", sizeof(hostname));
		hostname[sizeof(hostname) - 1] = '\0';

		/* a host name is at most 64 bytes, so tokens fit the lock table */
		token_backend = MemoryContextStrdup(TopMemoryContext,
											psprintf("pg:%.*s:%d:%d",
													 REDISLOCK_TOKEN_HOST_LEN,
													 hostname, PostPortNumber,
													 MyProcPid));
		token_random = MemoryContextStrdup(TopMemoryContext, hex);
	}
	return psprintf("%s:%u:%s", token_backend, serverid, token_random);
}

/* The owner token of this backend's locks on conn's server, made once */
char *
conn_owner_token(RedisConn *conn)
{
	if (conn->owner_token == NULL)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(conn->cxt);

		conn->owner_token = backend_owner_token(conn->serverid);
		MemoryContextSwitchTo(oldcxt);
	}
	return conn->owner_token;
}

/*
 * Make the channel on which a release wakes this backend while it waits for
 * lock, at the first wait: most locks are never waited for, and taking
 * them builds no more than their calls need.
 */
void
make_wake_channel(HeldLock *lock)
{
	MemoryContext oldcxt;

	if (lock->wake_channel != NULL)
		return;
	oldcxt = MemoryContextSwitchTo(locks_cxt);
	lock->wake_channel = redis_wake_channel(lock->tag.key, lock->tag.keylen,
											lock->prefixlen, lock->slot,
											conn_owner_token(lock->conn),
											&lock->wake_channellen);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Add the keys of the lock's waiters' queue and of its woken waiter to a
 * script call, as arguments (see ANNOUNCE_RELEASE in scripts.c for why not
 * as keys)
 */
void
add_queue_args(RedisCall *call, const HeldLock *lock)
{
	redis_call_arg(call, lock->waiters_key, lock->waiters_keylen);
	redis_call_arg(call, lock->handoff_key, lock->handoff_keylen);
}

/* Add the owner token of this backend's locks on the call's server */
void
add_token_arg(RedisCall *call)
{
	char	   *token = conn_owner_token(call->conn);

	redis_call_arg(call, token, strlen(token));
}

/*
 * Make call the release of lock in Redis, which answers 1 when the lock
 * was still ours: a semaphore gives back every permit it may have left; a
 * shared hold leaves the readers, or, covered by an exclusive hold of
 * ours, leaves the key as it is while that lasts; an exclusive hold
 * deletes the key, or, while a shared hold of ours stays, turns it into
 * our reader (downgrade_script).  A backend that waits no more for it
 * (waits_no_more: its wait gave up, or it holds the lock) leaves the
 * waiters' queue in the same step, and ends a hand-off to it, when it
 * waited for the lock: release_script says why.
 */
void
prepare_release(RedisCall *call, HeldLock *lock, bool waits_no_more)
{
	bool		other_holds = other_mode_holds(lock);

	if (lock->mode == LOCK_MODE_SEMAPHORE)
	{
		prepare_permit_release(call, lock, 0,
							   Max(lock->permits, lock->permits_reserved),
							   lock->permits, waits_no_more);
		return;
	}
	if (lock->mode == LOCK_MODE_EXCLUSIVE && other_holds)
	{
		HeldLock   *reader = find_lock(lock->tag.serverid, lock->tag.key,
									   lock->tag.keylen, LOCK_MODE_SHARED);

		lock_call_init(call, lock, &downgrade_script);
		call->nkeys = 1;
		add_lock_key(call, lock);
		add_token_arg(call);
		redis_call_int_arg(call, reader->ttl_ms);
		add_queue_args(call, lock);
		call->origin = lock;
		return;
	}
	lock_call_init(call, lock, lock->mode == LOCK_MODE_SHARED ?
				   &shared_release_script : &release_script);
	call->nkeys = 1;
	add_lock_key(call, lock);
	add_token_arg(call);
	add_queue_args(call, lock);
	if (lock->mode == LOCK_MODE_SHARED)
		redis_call_arg(call, other_holds ? "1" : "0", 1);
	if (waits_no_more && lock->wake_channel != NULL)
		redis_call_arg(call, lock->wake_channel, lock->wake_channellen);
	call->origin = lock;
}

/*
 * Make call the release of a semaphore's permits numbered first to first +
 * count - 1, which answers 1 when expected of them were still ours.  A
 * backend that waits no more leaves the waiters' queue as prepare_release()
 * says.
 */
void
prepare_permit_release(RedisCall *call, HeldLock *lock, int first, int count,
					   int expected, bool waits_no_more)
{
	lock_call_init(call, lock, &semaphore_release_script);
	call->nkeys = 1;
	add_lock_key(call, lock);
	add_token_arg(call);
	redis_call_int_arg(call, first);
	redis_call_int_arg(call, count);
	redis_call_int_arg(call, expected);
	redis_call_int_arg(call, lock->limit);
	add_queue_args(call, lock);
	if (waits_no_more && lock->wake_channel != NULL)
		redis_call_arg(call, lock->wake_channel, lock->wake_channellen);
	call->origin = lock;
}

/*
 * Make call the release of the n locks of locks[] that order[] names, on
 * one server and in one script group (order_by_script_group()), as
 * prepare_release() makes the release of one: a part of the call answers
 * for each lock.
 */
static void
prepare_release_set(RedisCall *call, HeldLock **locks, const int *order,
					int n, bool waits_no_more)
{
	RedisCall  *parts;
	bool		leaving = false;
	int			i;

	lock_call_init(call, locks[order[0]], &release_set_script);
	call->nkeys = n;
	for (i = 0; i < n; i++)
	{
		add_lock_key(call, locks[order[i]]);
		if (waits_no_more && locks[order[i]]->wake_channel != NULL)
			leaving = true;
	}
	add_token_arg(call);
	for (i = 0; i < n; i++)
	{
		HeldLock   *lock = locks[order[i]];

		add_queue_args(call, lock);
		if (leaving && lock->wake_channel != NULL)
			redis_call_arg(call, lock->wake_channel, lock->wake_channellen);
		else if (leaving)
			redis_call_arg(call, "", 0);
	}
	parts = redis_call_add_parts(call, n);
	for (i = 0; i < n; i++)
		parts[i].origin = locks[order[i]];
}

/*
 * Queue in batch the releases of locks[], as prepare_release() makes the
 * release of one, in as few calls as their servers allow: one call for
 * the locks of a server that one script may name together, each lock
 * answered by a part of it (redis_call_answer()), and a call of its own
 * for a lock that goes alone.
 */
void
queue_releases(RedisBatch *batch, HeldLock **locks, int nlocks,
			   bool waits_no_more)
{
	int		   *order = palloc(sizeof(int) * nlocks);
	int			n;
	int			i;

	for (i = 0; i < nlocks; i++)
		order[i] = i;
	order_by_script_group(locks, order, nlocks, true);
	for (i = 0; i < nlocks; i += n)
	{
		RedisCall  *call = redis_batch_add(batch);

		n = script_group_size(locks, order + i, nlocks - i, true);
		if (n == 1)
			prepare_release(call, locks[order[i]], waits_no_more);
		else
			prepare_release_set(call, locks, order + i, n, waits_no_more);
	}
	pfree(order);
}

/*
 * The integer answer of a compare-and-act script, raising an error for any
 * other answer.
 */
long long
script_result(const RedisCall *call, const char *key)
{
	if (call->reply_type != REDIS_REPLY_INTEGER)
		redis_unexpected_reply(call, key, ERROR);
	return call->integer;
}

void
warn_lost(HeldLock *lock)
{
	note_lease_lost(lock);
	if (lock->mode == LOCK_MODE_SEMAPHORE)
		ereport(WARNING,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("lease of the permits of Redis semaphore \"%s\" on server \"%s\" was lost",
						user_key(lock), lock->conn->servername),
				 errdetail("Permits of this backend at %s expired unrenewed.",
						   lock_endpoint(lock))));
	else
		ereport(WARNING,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("lease of Redis lock \"%s\" on server \"%s\" was lost",
						user_key(lock), lock->conn->servername),
				 errdetail("The lock at %s expired or was taken by another client; the key was left alone.",
						   lock_endpoint(lock))));
}
