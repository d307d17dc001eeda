/*-------------------------------------------------------------------------
 *
 * lockview.c
 *		redis_locks(): the Redis locks held or awaited, shown as pg_locks
 *		shows PostgreSQL's.
 *
 * With the preload, the rows come from a copy of the shared lock table:
 * every backend's locks, with the lease watchdog's renewals, and the keys
 * of other roles' backends hidden as pg_stat_activity hides their queries.
 * Without it, a backend sees its own locks only, from its table of held
 * locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "lock/lock.h"
#include "guc.h"

PG_FUNCTION_INFO_V1(redis_locks);

/* Who holds or awaits a lock, for redis_locks() */
typedef struct LockRowHolder
{
	text	   *key;			/* NULL when hidden from the current user */
	int			pid;
	const NameData *server;
	int64		renewals;
	TimestampTz lease_expires_at;	/* the later of the holder's and the
									 * watchdog's */
} LockRowHolder;

#define LOCK_ROW_COLUMNS 13

/* The mode column of redis_locks() */
static const char *const mode_names[] = {
	[LOCK_MODE_EXCLUSIVE] = "exclusive",
	[LOCK_MODE_SHARED] = "shared",
	[LOCK_MODE_SEMAPHORE] = "semaphore",
};

/*
 * One row: the holds and permits of one scope, held (granted) or awaited.
 * An installation that was not updated yet declares fewer columns, and
 * takes the first ones.
 */
static void
put_lock_row(ReturnSetInfo *rsinfo, const LockRowHolder *holder,
			 const RedisLockState *state, const char *scope, bool granted,
			 int holds, int permits)
{
	Datum		values[LOCK_ROW_COLUMNS];
	bool		nulls[LOCK_ROW_COLUMNS] = {false};

	values[0] = PointerGetDatum(holder->key);
	nulls[0] = holder->key == NULL;
	values[1] = CStringGetTextDatum(scope);
	values[2] = Int32GetDatum(holds);
	values[3] = Int64GetDatum(state->fence);
	values[4] = TimestampTzGetDatum(state->acquired_at);
	values[5] = TimestampTzGetDatum(holder->lease_expires_at);
	/* an awaited lock has no fence or lease yet; only a writer has a fence */
	nulls[3] = !granted || state->mode != LOCK_MODE_EXCLUSIVE;
	nulls[4] = nulls[5] = !granted;
	values[6] = Int32GetDatum(holder->pid);
	values[7] = NameGetDatum(holder->server);
	values[8] = BoolGetDatum(granted);
	values[9] = TimestampTzGetDatum(state->waiting_since);
	nulls[9] = granted;
	values[10] = Int64GetDatum(holder->renewals);
	values[11] = CStringGetTextDatum(mode_names[state->mode]);
	values[12] = Int32GetDatum(permits);
	nulls[12] = state->mode != LOCK_MODE_SEMAPHORE;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * The rows of one lock, like its rows of pg_locks: one per scope that has
 * holds, and one for the scope awaited (a semaphore's holder may wait for
 * more permits).  A lock with no holds left, whose release is under way,
 * has none.
 */
static void
put_lock_rows(ReturnSetInfo *rsinfo, const LockRowHolder *holder,
			  const RedisLockState *state)
{
	if (!state->granted)
		put_lock_row(rsinfo, holder, state,
					 state->session ? "session" : "transaction", false, 0,
					 state->wait_permits);
	if (state->session_holds > 0)
		put_lock_row(rsinfo, holder, state, "session", true,
					 state->session_holds, state->session_permits);
	if (state->xact_holds > 0)
		put_lock_row(rsinfo, holder, state, "transaction", true,
					 state->xact_holds, state->xact_permits);
}

/* The rows of this backend's locks, without the shared lock table */
static void
put_own_lock_rows(ReturnSetInfo *rsinfo)
{
	HASH_SEQ_STATUS status;
	HeldLock   *lock;

	if (held_locks == NULL)
		return;
	hash_seq_init(&status, held_locks);
	while ((lock = (HeldLock *) hash_seq_search(&status)) != NULL)
	{
		LockRowHolder holder;
		RedisLockState state;
		NameData	server;

		lock_state(lock, &state);
		namestrcpy(&server, lock->conn->servername);
		holder.key = cstring_to_text(user_key(lock));
		holder.pid = MyProcPid;
		holder.server = &server;
		holder.renewals = 0;
		holder.lease_expires_at = lock->lease_expires_at;
		put_lock_rows(rsinfo, &holder, &state);
	}
}

/*
 * The rows of every backend's locks, from the shared lock table.  Keys of
 * other roles' backends are shown as pg_stat_activity shows their queries.
 */
static void
put_shared_lock_rows(ReturnSetInfo *rsinfo)
{
	int			n;
	RedisLockEntry *entries = locktable_copy(&n);
	int			i;

	for (i = 0; i < n; i++)
	{
		RedisLockEntry *entry = &entries[i];
		LockRowHolder holder;

		holder.key = locktable_key_visible(entry->roleid) ?
			locktable_user_key(entry) : NULL;
		holder.pid = entry->pid;
		holder.server = &entry->servername;
		holder.renewals = pg_atomic_read_u64(&entry->renewals);
		holder.lease_expires_at =
			Max(entry->state.lease_expires_at,
				(TimestampTz) pg_atomic_read_u64(&entry->renewed_until));
		put_lock_rows(rsinfo, &holder, &entry->state);
	}
}

/*
 * redis_locks(): the Redis locks of every backend, held or awaited, when
 * the library is preloaded; otherwise this backend's.  The lease is the
 * holder's view: when it (or the watchdog) last renewed it, plus its ttl.
 */
Datum
redis_locks(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (redislock_preloaded)
		put_shared_lock_rows(rsinfo);
	else
		put_own_lock_rows(rsinfo);
	return (Datum) 0;
}
