/*-------------------------------------------------------------------------
 *
 * locktable.c
 *		The shared lock table: every Redis lock that any backend holds or
 *		waits for, when the library is preloaded.
 *
 * The table is a fixed array of redislock.max_locks entries, made at
 * postmaster start, with a list of the free ones.  A backend writes only
 * its own entries, under the table's lock in exclusive mode, and never
 * across Redis I/O: it claims an entry before its first attempt at a lock
 * (so a full table fails before Redis is touched), publishes what changed
 * (granted, holds, lease) once Redis has answered, and frees the entry
 * when it forgets the lock.  Readers copy the entries under the lock in
 * shared mode, and make rows of the copies after releasing it.  A renewer
 * touches only an entry's atomics, after checking under the shared lock
 * that the entry still has the id it copied.
 *
 * An entry leaves with its lock on every path where held.c forgets one
 * (release, transaction and savepoint end, a failed acquire, backend
 * exit); at exit, whatever a backend still has is freed after lockend.c's
 * own clean-up.  A crash restart makes the table anew.
 *
 * The entries of one lock (the same database, server and whole Redis key)
 * form its local queue: a waiter asks Redis only once no entry that came
 * before it still waits, and until then sleeps on its latch, making no
 * Redis call.  The queue orders the local waiters among themselves, and
 * nothing more: whether the lock is free is Redis' to say, and a local
 * holder does not keep the first in line from asking, for another client
 * may have deleted the key (an operator's DEL, a forced unlock), which
 * the local holder would learn only at its next renewal.  The first in
 * line waits in Redis as any waiter does, queued beside the key, where
 * the holder's release wakes it.  An entry that leaves (a holder that
 * released, a waiter that gave up) or that is granted sets the latch of
 * the lock's earliest waiter, so that the lock passes to the local
 * waiters in the order they came, and nobody sleeps behind one that left.
 * To find a lock's entries without a scan of the table, the entries in use
 * hang in hash chains, one per bucket of the hash of their lock; an
 * entry's next serves the free list while it is free and its chain while
 * in use.  The chains are the table's, not the entries': whoever claims or
 * frees an entry links or unlinks it, writing the next of another
 * backend's entry, under the lock in exclusive mode.  An entry whose key
 * is too long to be kept whole cannot be compared, so it is in no chain
 * and waits as a backend without the preload does.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "lock/lock.h"

/*
 * How many counters of listens asked and ended the table keeps: each
 * database counts on one, chosen by its OID, so that a worker looks at the
 * table when a waiter of its own database, or of the few that share its
 * counter, starts or ends a wait, not of every database
 */
#define WAKE_CHANGE_COUNTERS 64

typedef struct LockTable
{
	LWLock	   *lock;
	int			size;			/* redislock.max_locks */
	int			used;
	int			freelist;		/* the first free entry, -1 for none */
	uint64		last_id;
	/* counts the worker listens asked for and ended, by database */
	pg_atomic_uint32 wake_changes[WAKE_CHANGE_COUNTERS];
	int			nchains;		/* a power of two, at least size */
	RedisLockEntry entries[FLEXIBLE_ARRAY_MEMBER];
	/* then int chains[nchains]: each chain's first entry, -1 for none */
} LockTable;

static LockTable *table = NULL;
static int *chains = NULL;

/* Entries this backend has claimed and not freed yet */
static int	claimed = 0;

PG_FUNCTION_INFO_V1(redis_blocking_pids);

/* As many hash chains as entries at least, so that chains stay short */
static int
chain_count(void)
{
	return (int) pg_nextpower2_32((uint32) Max(redislock_max_locks, 1));
}

/* Where the chains start, after the entries */
static Size
chains_offset(void)
{
	return add_size(offsetof(LockTable, entries),
					mul_size(redislock_max_locks, sizeof(RedisLockEntry)));
}

static Size
locktable_shmem_size(void)
{
	return add_size(chains_offset(), mul_size(chain_count(), sizeof(int)));
}

void
locktable_shmem_request(void)
{
	RequestAddinShmemSpace(locktable_shmem_size());
	RequestNamedLWLockTranche("redislock locks", 1);
}

/*
 * Attach to the table, making it if this is the postmaster's first start
 * or a restart after a crash: every entry free.
 */
void
locktable_shmem_startup(void)
{
	bool		found;
	int			i;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	table = ShmemInitStruct("redislock lock table", locktable_shmem_size(),
							&found);
	chains = (int *) ((char *) table + chains_offset());
	if (!found)
	{
		table->lock = &(GetNamedLWLockTranche("redislock locks"))->lock;
		table->size = redislock_max_locks;
		table->used = 0;
		table->last_id = 0;
		for (i = 0; i < WAKE_CHANGE_COUNTERS; i++)
			pg_atomic_init_u32(&table->wake_changes[i], 0);
		table->nchains = chain_count();
		for (i = 0; i < table->nchains; i++)
			chains[i] = -1;
		for (i = 0; i < table->size; i++)
		{
			RedisLockEntry *entry = &table->entries[i];

			memset(entry, 0, sizeof(RedisLockEntry));
			entry->index = i;
			entry->next = i + 1 < table->size ? i + 1 : -1;
			pg_atomic_init_u32(&entry->lost, 0);
			pg_atomic_init_u64(&entry->renewals, 0);
			pg_atomic_init_u64(&entry->renewed_until, 0);
		}
		table->freelist = table->size > 0 ? 0 : -1;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Do two entries name the same lock: the same server and Redis key? */
static bool
same_lock(const RedisLockEntry *a, const RedisLockEntry *b)
{
	return a->dbid == b->dbid && a->serverid == b->serverid &&
		a->keylen == b->keylen && a->keyhash == b->keyhash &&
		memcmp(a->key, b->key, Min(a->keylen, REDISLOCK_ENTRY_KEY_LEN)) == 0;
}

/* The counter of listens asked and ended of database dbid */
static pg_atomic_uint32 *
wake_changes_of(Oid dbid)
{
	return &table->wake_changes[murmurhash32(dbid) % WAKE_CHANGE_COUNTERS];
}

/* Is the entry in the chain of its lock, being comparable with others? */
static bool
queued(const RedisLockEntry *entry)
{
	return entry->key_complete;
}

/* The chain that the entries of entry's lock hang in */
static int *
chain_of(const RedisLockEntry *entry)
{
	uint32		hash = hash_combine(murmurhash32(entry->dbid),
									murmurhash32(entry->serverid));

	hash = hash_combine(hash, entry->keyhash);
	return &chains[hash & (table->nchains - 1)];
}

/* Link a claimed entry into its chain; the caller holds the lock */
static void
link_entry(RedisLockEntry *entry)
{
	int		   *first = chain_of(entry);

	entry->next = *first;
	*first = entry->index;
}

/* Unlink an entry from its chain; the caller holds the lock */
static void
unlink_entry(RedisLockEntry *entry)
{
	int		   *link = chain_of(entry);

	while (*link != entry->index)
	{
		Assert(*link >= 0);
		link = &table->entries[*link].next;
	}
	*link = entry->next;
}

/*
 * The earliest entry other than entry that waits for entry's lock, NULL
 * for none; the caller holds the lock.
 */
static RedisLockEntry *
earliest_waiter(const RedisLockEntry *entry)
{
	RedisLockEntry *earliest = NULL;
	int			i;

	for (i = *chain_of(entry); i >= 0; i = table->entries[i].next)
	{
		RedisLockEntry *other = &table->entries[i];

		if (other != entry && !other->state.granted &&
			same_lock(other, entry) &&
			(earliest == NULL || other->id < earliest->id))
			earliest = other;
	}
	return earliest;
}

/*
 * The PGPROC number of the waiter to wake when a queued entry no longer
 * keeps the others of its lock waiting, -1 if none: the earliest waiter,
 * when the entry came before it or held the lock (its release may have
 * freed the lock); the caller holds the lock.
 */
static int
next_to_wake(const RedisLockEntry *entry, bool held)
{
	RedisLockEntry *next = earliest_waiter(entry);

	if (next != NULL && (held || entry->id < next->id))
		return next->procno;
	return -1;
}

/*
 * Put an entry back on the free list; the caller holds the lock.  When the
 * entry held its lock, or was the first in line for it, the next waiter's
 * turn may have come: the PGPROC number to wake is returned, -1 if none.
 */
static int
free_entry(RedisLockEntry *entry)
{
	int			wake = -1;

	if (queued(entry))
	{
		wake = next_to_wake(entry, entry->state.granted);
		unlink_entry(entry);
	}
	if (pg_atomic_read_u32(&entry->wake_asked) != 0)
		pg_atomic_fetch_add_u32(wake_changes_of(entry->dbid), 1);
	entry->id = 0;
	entry->pid = 0;
	entry->next = table->freelist;
	table->freelist = entry->index;
	table->used--;
	return wake;
}

/* Tell a waiter that its turn may have come */
static void
wake_waiter(int procno)
{
	if (procno >= 0)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/*
 * Backend exit, after lockend.c has released what it could (xact.c registers
 * this with on_shmem_exit, which runs after before_shmem_exit callbacks):
 * free the entries still claimed, so that none outlives its backend.  Their
 * waiters are woken at once, under the lock: this is no hot path.
 */
void
locktable_exit(int code, Datum arg)
{
	int			i;

	if (claimed == 0)
		return;
	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	for (i = 0; i < table->size; i++)
		if (table->entries[i].id != 0 && table->entries[i].pid == MyProcPid)
			wake_waiter(free_entry(&table->entries[i]));
	LWLockRelease(table->lock);
	claimed = 0;
}

/* Fill a claimed entry with the lock's identity; the caller holds the lock */
static void
fill_entry(RedisLockEntry *entry, RedisConn *conn, const char *rkey,
		   int rkeylen, uint32 keyhash, const RedisLockState *state)
{
	entry->pid = MyProcPid;
	entry->procno = MyProcNumber;
	entry->dbid = MyDatabaseId;
	entry->roleid = GetSessionUserId();
	entry->userid = conn->userid;
	entry->serverid = conn->serverid;
	namestrcpy(&entry->servername, conn->servername);
	entry->keylen = rkeylen;
	entry->prefixlen = strlen(conn->key_prefix);
	entry->keyhash = keyhash;
	entry->key_complete = rkeylen <= REDISLOCK_ENTRY_KEY_LEN;
	memcpy(entry->key, rkey, Min(rkeylen, REDISLOCK_ENTRY_KEY_LEN));
	strlcpy(entry->token, conn->owner_token, REDISLOCK_TOKEN_LEN);
	entry->state = *state;
	pg_atomic_write_u32(&entry->lost, 0);
	pg_atomic_write_u64(&entry->renewals, 0);
	pg_atomic_write_u64(&entry->renewed_until, 0);
	pg_atomic_write_u32(&entry->wake_asked, 0);
	pg_atomic_write_u32(&entry->wake_answered, 0);
	pg_atomic_write_u32(&entry->wake_hears, 0);
	pg_atomic_write_u32(&entry->wake_heard, 0);
	pg_atomic_write_u32(&entry->wake_holder_announces, 0);
}

/*
 * Claim an entry for a lock on conn's server, with its owner token made,
 * in the state given.  Without the preload there is no table, and the
 * reference says so.  A full table is an error, raised before the caller
 * touches Redis.
 */
LockTableRef
locktable_claim(RedisConn *conn, const char *rkey, int rkeylen,
				const RedisLockState *state)
{
	LockTableRef ref = {-1, 0};
	uint32		keyhash;
	RedisLockEntry *entry;

	if (table == NULL)
		return ref;
	Assert(conn->owner_token != NULL);
	keyhash = hash_bytes((const unsigned char *) rkey, rkeylen);

	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	if (table->freelist < 0)
	{
		LWLockRelease(table->lock);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of Redis lock table entries"),
				 errdetail("All %d entries are taken by locks that backends hold or wait for.",
						   table->size),
				 errhint("You might need to increase redislock.max_locks.")));
	}
	entry = &table->entries[table->freelist];
	table->freelist = entry->next;
	table->used++;
	entry->id = ++table->last_id;
	fill_entry(entry, conn, rkey, rkeylen, keyhash, state);
	if (queued(entry))
		link_entry(entry);
	else
		entry->next = -1;
	ref.index = entry->index;
	ref.id = entry->id;
	LWLockRelease(table->lock);
	claimed++;
	return ref;
}

/*
 * Publish the state of this backend's lock.  A waiter granted the lock no
 * longer keeps the next local waiter from asking Redis: it is woken, to
 * wait in Redis, where it hears of the key's release or deletion.
 */
void
locktable_publish(LockTableRef ref, const RedisLockState *state)
{
	RedisLockEntry *entry;
	int			wake = -1;

	if (ref.index < 0)
		return;
	entry = &table->entries[ref.index];
	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	Assert(entry->id == ref.id);
	if (state->granted && !entry->state.granted && queued(entry))
		wake = next_to_wake(entry, false);
	entry->state = *state;
	LWLockRelease(table->lock);
	wake_waiter(wake);
}

/*
 * Free the entry of a lock this backend forgets, once Redis has answered
 * its release if it had one, and wake the lock's next waiter if its turn
 * may have come.
 */
void
locktable_release(LockTableRef ref)
{
	int			wake;

	if (ref.index < 0)
		return;
	LWLockAcquire(table->lock, LW_EXCLUSIVE);
	Assert(table->entries[ref.index].id == ref.id &&
		   table->entries[ref.index].pid == MyProcPid);
	wake = free_entry(&table->entries[ref.index]);
	LWLockRelease(table->lock);
	claimed--;
	wake_waiter(wake);
}

/*
 * Is it the turn of this backend's entry to ask Redis for its lock: does
 * no entry that came before it still wait?  A local holder does not count:
 * Redis, which another client may have told to delete the key, says
 * whether the lock is free, and the first in line asks it.
 */
static bool
is_turn_of(LockTableRef ref)
{
	RedisLockEntry *self = &table->entries[ref.index];
	bool		turn = true;
	int			i;

	LWLockAcquire(table->lock, LW_SHARED);
	Assert(self->id == ref.id);
	for (i = queued(self) ? *chain_of(self) : -1; i >= 0 && turn;
		 i = table->entries[i].next)
	{
		RedisLockEntry *other = &table->entries[i];

		if (other != self && !other->state.granted &&
			other->id < self->id && same_lock(other, self))
			turn = false;
	}
	LWLockRelease(table->lock);
	return turn;
}

/*
 * Before each attempt at a lock in Redis: true when it is this backend's
 * turn, among the local waiters, to ask.  Otherwise sleep on the latch for
 * at most timeout_ms (-1: no limit; 0: do not sleep) and return false: the
 * caller checks its deadline and asks again.  An entry before it that
 * leaves, or is granted, wakes the next waiter; interrupts are serviced
 * on waking.  Always true without the preload.
 */
bool
locktable_wait_turn(LockTableRef ref, long timeout_ms)
{
	int			events = WL_LATCH_SET | WL_EXIT_ON_PM_DEATH;

	if (ref.index < 0 || is_turn_of(ref))
		return true;
	if (timeout_ms == 0)
		return false;
	if (timeout_ms > 0)
		events |= WL_TIMEOUT;
	(void) WaitLatch(MyLatch, events, timeout_ms, redislock_wait_event());
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	return false;
}

/*
 * Is the entry one that a copy wants: of database dbid (InvalidOid: of
 * any), and, for listens_only, one whose waiter asked its worker to listen
 * for it?  The caller holds the lock.
 */
static bool
copy_wants(RedisLockEntry *entry, Oid dbid, bool listens_only)
{
	return entry->id != 0 &&
		(dbid == InvalidOid || entry->dbid == dbid) &&
		(!listens_only || pg_atomic_read_u32(&entry->wake_asked) != 0);
}

/*
 * A palloc'd copy of the entries in use that copy_wants(), and their
 * number.  The array is allocated before the lock is taken, for as many
 * entries as were in use then; if more are in use once it is taken, that
 * is done again.
 */
static RedisLockEntry *
copy_entries(Oid dbid, bool listens_only, int *count)
{
	for (;;)
	{
		int			room = Max(table->used, 1);
		RedisLockEntry *copies = palloc(sizeof(RedisLockEntry) * room);
		int			n = 0;
		int			seen = 0;
		int			i;

		LWLockAcquire(table->lock, LW_SHARED);
		if (table->used <= room)
		{
			for (i = 0; i < table->size && seen < table->used; i++)
			{
				if (table->entries[i].id == 0)
					continue;
				seen++;
				if (copy_wants(&table->entries[i], dbid, listens_only))
					copies[n++] = table->entries[i];
			}
			LWLockRelease(table->lock);
			*count = n;
			return copies;
		}
		LWLockRelease(table->lock);
		pfree(copies);
	}
}

/* A palloc'd copy of every entry in use, and their number */
RedisLockEntry *
locktable_copy(int *count)
{
	return copy_entries(InvalidOid, false, count);
}

/*
 * For the worker: a palloc'd copy of the entries of its database, and
 * their number; with listens_only, only of those whose waiter asked it to
 * listen.  A worker looks at its own database's locks, and copies no
 * other's.
 */
RedisLockEntry *
locktable_copy_database(bool listens_only, int *count)
{
	return copy_entries(MyDatabaseId, listens_only, count);
}

/*
 * Look up, under the shared lock, the entry that ref names: NULL when it
 * was freed or went to another lock since ref was taken.
 */
static RedisLockEntry *
referenced_entry(LockTableRef ref)
{
	RedisLockEntry *entry = &table->entries[ref.index];

	return entry->id == ref.id ? entry : NULL;
}

/*
 * For the lease watchdog: count a renewal of the entry's lease, which now
 * runs until lease_expires_at.  False when the entry is no longer that
 * lock's, whose holder has released it or exited.
 */
bool
locktable_note_renewal(LockTableRef ref, TimestampTz lease_expires_at)
{
	RedisLockEntry *entry;

	if (ref.index < 0)
		return false;
	LWLockAcquire(table->lock, LW_SHARED);
	entry = referenced_entry(ref);
	if (entry != NULL)
	{
		pg_atomic_fetch_add_u64(&entry->renewals, 1);
		pg_atomic_write_u64(&entry->renewed_until, (uint64) lease_expires_at);
	}
	LWLockRelease(table->lock);
	return entry != NULL;
}

/*
 * Mark the entry's lease as found lost, by its holder or by the watchdog.
 * True for the first to find it (who counts it), and always without the
 * preload, as then nobody else looks.
 */
bool
locktable_mark_lost(LockTableRef ref)
{
	RedisLockEntry *entry;
	bool		first = false;

	if (ref.index < 0)
		return true;
	LWLockAcquire(table->lock, LW_SHARED);
	entry = referenced_entry(ref);
	if (entry != NULL)
		first = pg_atomic_exchange_u32(&entry->lost, 1) == 0;
	LWLockRelease(table->lock);
	return first;
}

/*
 * Has the lease of this backend's lock been found lost, by the lease
 * watchdog or by the backend itself?  Read without the lock: the entry is
 * the backend's own.  Never without the preload: nobody else looks.
 */
bool
locktable_lease_lost(LockTableRef ref)
{
	if (ref.index < 0)
		return false;
	Assert(table->entries[ref.index].id == ref.id);
	return pg_atomic_read_u32(&table->entries[ref.index].lost) != 0;
}

/*
 * A waiter asks its database's worker to listen for the releases of its
 * lock (waker.c): returns the number of the request, which the answer
 * names.  What the worker heard before is forgotten.  The entry is the
 * backend's own, and the worker reads it under the shared lock: the
 * barrier orders the writes before the request.
 */
uint32
locktable_wake_ask(LockTableRef ref)
{
	static uint32 last_request = 0;
	RedisLockEntry *entry = &table->entries[ref.index];

	Assert(entry->id == ref.id);
	if (++last_request == 0)
		last_request = 1;
	pg_atomic_write_u32(&entry->wake_heard, 0);
	pg_write_barrier();
	pg_atomic_write_u32(&entry->wake_asked, last_request);
	pg_atomic_fetch_add_u32(wake_changes_of(entry->dbid), 1);
	return last_request;
}

/* The worker's answer to request asked: WAKE_* bits, -1 while none came */
int
locktable_wake_answer(LockTableRef ref, uint32 asked)
{
	RedisLockEntry *entry = &table->entries[ref.index];

	if (pg_atomic_read_u32(&entry->wake_answered) != asked)
		return -1;
	pg_read_barrier();
	return (int) pg_atomic_read_u32(&entry->wake_hears);
}

/*
 * Whether the holder that refused the waiter's last attempt is one of
 * ours, whose DEL is announced on the wake channel: its keyspace event
 * then wakes nobody, as wake.c has it for its own subscriptions
 */
void
locktable_wake_holder_announces(LockTableRef ref, bool announces)
{
	pg_atomic_write_u32(&table->entries[ref.index].wake_holder_announces,
						announces ? 1 : 0);
}

/* Has the worker heard a release since this was last asked?  Forget it */
bool
locktable_wake_take_heard(LockTableRef ref)
{
	return pg_atomic_exchange_u32(&table->entries[ref.index].wake_heard,
								  0) != 0;
}

/* The wait ended: the worker may stop listening */
void
locktable_wake_end(LockTableRef ref)
{
	if (ref.index >= 0 &&
		pg_atomic_exchange_u32(&table->entries[ref.index].wake_asked, 0) != 0)
		pg_atomic_fetch_add_u32(wake_changes_of(MyDatabaseId), 1);
}

/*
 * For the worker: a number that changes whenever a listen is asked for or
 * ended in its database (and in the few that share its counter), so that
 * the worker looks at the table only then, not at every message that
 * wakes a waiter, nor at every wait of another database.  Each change is
 * counted after the entry is written, with a full barrier: a worker that
 * reads the number before it looks sees at least what was counted by then.
 */
uint32
locktable_wake_changes(void)
{
	return pg_atomic_read_u32(wake_changes_of(MyDatabaseId));
}

/*
 * For the worker: answer request asked of the entry, if it still stands,
 * and wake the waiter
 */
void
locktable_wake_reply(LockTableRef ref, uint32 asked, int hears)
{
	RedisLockEntry *entry;

	LWLockAcquire(table->lock, LW_SHARED);
	entry = referenced_entry(ref);
	if (entry != NULL && pg_atomic_read_u32(&entry->wake_asked) == asked)
	{
		pg_atomic_write_u32(&entry->wake_hears, (uint32) hears);
		pg_write_barrier();
		pg_atomic_write_u32(&entry->wake_answered, asked);
		wake_waiter(entry->procno);
	}
	LWLockRelease(table->lock);
}

/*
 * Does a local backend hold the lock of a waiter's entry, with holds that
 * it has not begun to release?  Holds that end are shown ended before
 * their release deletes the key (lockend.c), so a DEL of the key while such
 * a holder is there is another client's.  The caller holds the lock.
 */
static bool
held_here(const RedisLockEntry *waiter)
{
	int			i;

	for (i = queued(waiter) ? *chain_of(waiter) : -1; i >= 0;
		 i = table->entries[i].next)
	{
		RedisLockEntry *other = &table->entries[i];

		if (other != waiter && other->state.granted &&
			other->state.session_holds + other->state.xact_holds > 0 &&
			same_lock(other, waiter))
			return true;
	}
	return false;
}

/*
 * For the worker: a release of the entry's lock was heard, or the key's
 * DEL (del).  A DEL wakes the waiter when its holder announces nothing,
 * or when that holder is a local backend that did not release: then
 * another client deleted the key under it, and nobody announces that.
 */
void
locktable_wake_heard(LockTableRef ref, bool del)
{
	RedisLockEntry *entry;

	LWLockAcquire(table->lock, LW_SHARED);
	entry = referenced_entry(ref);
	if (entry != NULL && pg_atomic_read_u32(&entry->wake_asked) != 0 &&
		(!del || pg_atomic_read_u32(&entry->wake_holder_announces) == 0 ||
		 held_here(entry)))
	{
		pg_atomic_write_u32(&entry->wake_heard, 1);
		wake_waiter(entry->procno);
	}
	LWLockRelease(table->lock);
}

/*
 * redis_blocking_pids(pid): the backends of this server that hold the
 * Redis lock that pid waits for, as pg_blocking_pids() does for
 * PostgreSQL's locks: readers block a writer, and writers anyone.  Empty when pid waits for none, or only for a lock
 * that clients elsewhere hold.
 */
Datum
redis_blocking_pids(PG_FUNCTION_ARGS)
{
	int			pid;
	RedisLockEntry *entries;
	const RedisLockEntry *waiter = NULL;
	Datum	   *pids;
	int			npids = 0;
	int			n;
	int			i;
	int			j;

	redis_require_preload("redis_blocking_pids");
	require_argument(fcinfo, 0, "pid");
	pid = PG_GETARG_INT32(0);
	entries = locktable_copy(&n);
	for (i = 0; i < n && waiter == NULL; i++)
		if (entries[i].pid == pid && !entries[i].state.granted)
			waiter = &entries[i];

	pids = palloc(sizeof(Datum) * Max(n, 1));
	for (i = 0; waiter != NULL && i < n; i++)
	{
		if (!entries[i].state.granted || entries[i].pid == pid ||
			!same_lock(&entries[i], waiter) ||
			(waiter->state.mode == LOCK_MODE_SHARED &&
			 entries[i].state.mode == LOCK_MODE_SHARED))
			continue;
		for (j = 0; j < npids; j++)
			if (DatumGetInt32(pids[j]) == entries[i].pid)
				break;
		if (j == npids)
			pids[npids++] = Int32GetDatum(entries[i].pid);
	}
	PG_RETURN_ARRAYTYPE_P(construct_array(pids, npids, INT4OID,
										  sizeof(int32), true, TYPALIGN_INT));
}

/*
 * May the current user see the keys of a backend whose session user is
 * roleid?  As for pg_stat_activity's queries: members of
 * pg_read_all_stats, and of that role.
 */
bool
locktable_key_visible(Oid roleid)
{
	return has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS) ||
		has_privs_of_role(GetUserId(), roleid);
}

/*
 * The user's part of an entry's key, as it has it: after the prefix, cut
 * at a whole character when the entry could not keep all of it, and at a
 * NUL byte as lockview.c shows a backend's own keys.
 */
text *
locktable_user_key(const RedisLockEntry *entry)
{
	int			kept = Min(entry->keylen, REDISLOCK_ENTRY_KEY_LEN);
	const char *key = entry->key + Min(entry->prefixlen, kept);
	int			len = strnlen(key, kept - Min(entry->prefixlen, kept));

	if (!entry->key_complete)
		len = pg_mbcliplen(key, len, len);
	return cstring_to_text_with_len(key, len);
}
