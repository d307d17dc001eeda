/*-------------------------------------------------------------------------
 *
 * lockfuncs.c
 *		The SQL functions of Redis locks: acquire, release, extend, and the
 *		fencing token.
 *
 * Each checks its arguments before Redis is touched, finds this backend's
 * entry for the key on the current server, and leaves the Redis work to
 * acquire.c, lease.c and held.c.  A release changes the entries only once
 * Redis has answered, so that a release that failed can be retried.  A
 * lock granted or extended is published in the shared lock table, and
 * the lease watchdog is asked to renew it when redislock.lease_renewal
 * says so.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "lock/lock.h"
#include "guc.h"
#include "worker/worker.h"

PG_FUNCTION_INFO_V1(redis_lock_acquire);
PG_FUNCTION_INFO_V1(redis_lock_acquire_session);
PG_FUNCTION_INFO_V1(redis_lock_acquire_shared);
PG_FUNCTION_INFO_V1(redis_lock_acquire_shared_session);
PG_FUNCTION_INFO_V1(redis_lock_release_shared);
PG_FUNCTION_INFO_V1(redis_lock_acquire_all);
PG_FUNCTION_INFO_V1(redis_lock_acquire_all_session);
PG_FUNCTION_INFO_V1(redis_lock_release);
PG_FUNCTION_INFO_V1(redis_lock_release_all);
PG_FUNCTION_INFO_V1(redis_lock_extend);
PG_FUNCTION_INFO_V1(redis_lock_fence);
PG_FUNCTION_INFO_V1(redis_fence_guard);
PG_FUNCTION_INFO_V1(redis_semaphore_acquire);
PG_FUNCTION_INFO_V1(redis_semaphore_acquire_session);
PG_FUNCTION_INFO_V1(redis_semaphore_release);

/*
 * A lease (ttl_ms), which must be positive, or a wait (wait_ms), which may
 * also be 0 (do not wait) or -1 (no limit)
 */
static int
validated_ms(FunctionCallInfo fcinfo, int argno, bool is_wait)
{
	int			ms;

	require_argument(fcinfo, argno, is_wait ? "wait_ms" : "ttl_ms");
	ms = PG_GETARG_INT32(argno);
	if (is_wait && ms < -1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("wait_ms must be -1 (no limit), 0 (no wait) or a number of milliseconds: %d",
						ms)));
	if (!is_wait && ms <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl_ms must be greater than zero: %d", ms)));
	return ms;
}

/*
 * A count of permits (argno), which must be positive and, for the permits
 * asked (at_most > 0), no more than the limit at_most
 */
static int
validated_permits(FunctionCallInfo fcinfo, int argno, const char *name,
				  int at_most)
{
	int			n;

	require_argument(fcinfo, argno, name);
	n = PG_GETARG_INT32(argno);
	if (n < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be greater than zero: %d", name, n)));
	if (at_most > 0 && n > at_most)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not exceed lim: %d > %d", name, n, at_most)));
	return n;
}

/*
 * The held lock in mode for the key argument; *conn_out and *rkey_out
 * receive the server's connection and the Redis key.  NULL when the
 * backend has no such entry.
 */
static HeldLock *
lookup_key_arg(FunctionCallInfo fcinfo, LockMode mode, RedisConn **conn_out,
			   char **rkey_out, int *rkeylen_out)
{
	text	   *key = redis_key_arg(fcinfo, 0);
	RedisConn  *conn = redis_conn_current();
	int			rkeylen;
	char	   *rkey = redis_key(conn->key_prefix, VARDATA_ANY(key),
								 VARSIZE_ANY_EXHDR(key), &rkeylen);

	if (conn_out)
		*conn_out = conn;
	if (rkey_out)
		*rkey_out = rkey;
	if (rkeylen_out)
		*rkeylen_out = rkeylen;
	return find_lock(conn->serverid, rkey, rkeylen, mode);
}

/*
 * A key that this backend holds or awaits as a semaphore cannot be taken
 * as a lock, in either mode, nor the other way round: in Redis a
 * semaphore's permits and a lock's readers would mix in one sorted set.
 */
static void
check_kind(RedisConn *conn, const char *rkey, int rkeylen, LockMode mode)
{
	HeldLock   *other;

	if (mode != LOCK_MODE_SEMAPHORE)
	{
		other = find_lock(conn->serverid, rkey, rkeylen, LOCK_MODE_SEMAPHORE);
		if (other != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("Redis key \"%s\" is a semaphore of this session, not a lock",
							user_key(other))));
		return;
	}
	other = find_lock(conn->serverid, rkey, rkeylen, LOCK_MODE_EXCLUSIVE);
	if (other == NULL)
		other = find_lock(conn->serverid, rkey, rkeylen, LOCK_MODE_SHARED);
	if (other != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("Redis key \"%s\" is a lock of this session, not a semaphore",
						user_key(other))));
}

/*
 * Until when the lease watchdog renews the lease of a lock just granted:
 * redislock.lease_renewal_limit after the grant, DT_NOEND for no limit, 0
 * when it does not renew it at all: renewal is off for the session, there
 * is no shared lock table (no preload), or the key is longer than a table
 * entry keeps.
 */
static TimestampTz
renewal_end(const HeldLock *lock)
{
	if (!redislock_lease_renewal || lock->shared.index < 0 ||
		lock->tag.keylen > REDISLOCK_ENTRY_KEY_LEN)
		return 0;
	if (redislock_lease_renewal_limit == 0)
		return DT_NOEND;
	return TimestampTzPlusMilliseconds(lock->acquired_at,
									   redislock_lease_renewal_limit);
}

/*
 * Make sure the lease watchdog renews the lease of a lock it should renew,
 * whose state is published: by a third of the lease's ttl
 */
static void
ask_for_renewal(const HeldLock *lock)
{
	if (lock->renew_until != 0)
		redislock_request_renewal(TimestampTzPlusMilliseconds(lock->lease_expires_at,
															  -2 * (lock->ttl_ms / 3)));
}

/*
 * The entry of a lock about to be asked for in Redis, for a session or a
 * transaction hold, and for a semaphore the permits asked for
 * (wait_permits; 0 for a lock): made anew, or kept from an earlier attempt
 * or an earlier hold and awaited again
 */
static HeldLock *
lock_to_await(HeldLock *lock, RedisConn *conn, const char *rkey, int rkeylen,
			  LockMode mode, bool session, int wait_permits)
{
	if (lock == NULL)
		return create_lock(conn, rkey, rkeylen, mode, session, wait_permits);
	lock->waiting_since = GetCurrentTimestamp();
	lock->wait_session = session;
	lock->wait_permits = wait_permits;
	publish_lock(lock);
	return lock;
}

/* A lock that Redis has just granted is awaited no more */
static void
note_granted(HeldLock *lock)
{
	lock->waiting_since = 0;
	lock->renew_until = renewal_end(lock);
}

/* One more hold of a lock, published and renewed as the settings say */
static void
hold_granted(HeldLock *lock, bool session, int permits)
{
	add_hold(lock, session, permits);
	publish_lock(lock);
	ask_for_renewal(lock);
}

/*
 * A shared hold of a lock that this backend holds exclusively (writer):
 * its exclusive hold covers the shared one in Redis, so it is only
 * confirmed and renewed there, as a second acquire of it would be, and
 * the shared entry shares its lease.
 */
static HeldLock *
share_own_lock(HeldLock *writer, HeldLock *lock, bool session, int ttl_ms)
{
	TimestampTz start = GetCurrentTimestamp();

	(void) renew_held_lock(writer, ttl_ms, ERROR);
	publish_lock(writer);
	lock = lock_to_await(lock, writer->conn, writer->tag.key,
						 writer->tag.keylen, LOCK_MODE_SHARED, session, 0);
	lock->in_redis = true;
	lock->acquired_at = start;
	set_lease(lock, ttl_ms, start);
	note_granted(lock);
	return lock;
}

/*
 * A hold of a lock in mode, exclusive or shared.  A backend's own holds
 * never conflict: holds of the same mode stack (confirmed and renewed in
 * Redis), a shared hold joins an exclusive one (share_own_lock()), and an
 * exclusive acquire takes over a lock that only this backend reads.
 */
static bool
acquire_lock(FunctionCallInfo fcinfo, LockMode mode, bool session)
{
	int			ttl_ms = validated_ms(fcinfo, 1, false);
	int			wait_ms = validated_ms(fcinfo, 2, true);
	RedisConn  *conn;
	char	   *rkey;
	int			rkeylen;
	HeldLock   *lock = lookup_key_arg(fcinfo, mode, &conn, &rkey, &rkeylen);
	HeldLock   *writer;

	check_kind(conn, rkey, rkeylen, mode);
	check_ttl_for_server(conn, ttl_ms);
	if (lock != NULL && total_holds(lock) > 0)
		(void) renew_held_lock(lock, ttl_ms, ERROR);
	else if (mode == LOCK_MODE_SHARED &&
			 (writer = find_lock(conn->serverid, rkey, rkeylen,
								 LOCK_MODE_EXCLUSIVE)) != NULL &&
			 total_holds(writer) > 0)
		lock = share_own_lock(writer, lock, session, ttl_ms);
	else
	{
		lock = lock_to_await(lock, conn, rkey, rkeylen, mode, session, 0);
		if (!acquire_in_redis(lock, ttl_ms, wait_ms))
		{
			remove_lock(lock);
			return false;
		}
		note_granted(lock);
	}
	hold_granted(lock, session, 0);
	return true;
}

/*
 * redis_lock_acquire(key, ttl_ms, wait_ms): a lock held until the end of
 * the transaction (or of the savepoint it was taken in, on rollback)
 */
Datum
redis_lock_acquire(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(acquire_lock(fcinfo, LOCK_MODE_EXCLUSIVE, false));
}

/* redis_lock_acquire_session(key, ttl_ms, wait_ms): held until released */
Datum
redis_lock_acquire_session(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(acquire_lock(fcinfo, LOCK_MODE_EXCLUSIVE, true));
}

/*
 * redis_lock_acquire_shared(key, ttl_ms, wait_ms): a lock held in shared
 * mode until the end of the transaction
 */
Datum
redis_lock_acquire_shared(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(acquire_lock(fcinfo, LOCK_MODE_SHARED, false));
}

/*
 * redis_lock_acquire_shared_session(key, ttl_ms, wait_ms): held in shared
 * mode until released
 */
Datum
redis_lock_acquire_shared_session(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(acquire_lock(fcinfo, LOCK_MODE_SHARED, true));
}

/* A Redis key of a multi-key acquire: its lock's key, and where it came */
typedef struct KeyOfSet
{
	char	   *rkey;
	int			rkeylen;
	int			argpos;			/* its place in the keys argument, from 1 */
} KeyOfSet;

static int
key_of_set_cmp(const void *a, const void *b)
{
	const KeyOfSet *ka = (const KeyOfSet *) a;
	const KeyOfSet *kb = (const KeyOfSet *) b;
	int			cmp = memcmp(ka->rkey, kb->rkey, Min(ka->rkeylen, kb->rkeylen));

	return cmp != 0 ? cmp : ka->rkeylen - kb->rkeylen;
}

/*
 * The keys argument (argno) of a multi-key acquire, as Redis keys of the
 * current server (*conn) in the order of their bytes, so that every set is
 * asked for in one order: a one-dimensional array of non-null, non-empty,
 * distinct keys, checked before the server is looked up or Redis asked.
 */
static KeyOfSet *
key_set_arg(FunctionCallInfo fcinfo, int argno, RedisConn **conn, int *nkeys)
{
	ArrayType  *array;
	Datum	   *elems;
	bool	   *nulls;
	KeyOfSet   *keys;
	int			n;
	int			i;

	require_argument(fcinfo, argno, "keys");
	array = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("keys must be a one-dimensional array")));
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("keys must not be empty")));
	for (i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("Redis key must not be null"),
					 errdetail("Element %d of keys is null.", i + 1)));
		if (VARSIZE_ANY_EXHDR(DatumGetTextPP(elems[i])) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("Redis key must not be empty"),
					 errdetail("Element %d of keys is empty.", i + 1)));
	}
	*conn = redis_conn_current();
	keys = palloc(sizeof(KeyOfSet) * n);
	for (i = 0; i < n; i++)
	{
		text	   *key = DatumGetTextPP(elems[i]);

		keys[i].rkey = redis_key((*conn)->key_prefix, VARDATA_ANY(key),
								 VARSIZE_ANY_EXHDR(key), &keys[i].rkeylen);
		keys[i].argpos = i + 1;
	}
	qsort(keys, n, sizeof(KeyOfSet), key_of_set_cmp);
	for (i = 1; i < n; i++)
		if (key_of_set_cmp(&keys[i - 1], &keys[i]) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("Redis key \"%s\" appears more than once in keys",
							keys[i].rkey + strlen((*conn)->key_prefix)),
					 errdetail("Elements %d and %d of keys are the same key.",
							   Min(keys[i - 1].argpos, keys[i].argpos),
							   Max(keys[i - 1].argpos, keys[i].argpos))));
	*nkeys = n;
	return keys;
}

/*
 * Every key of the keys argument, or none: each key then holds as one
 * redis_lock_acquire() would, and ends as it does.  Keys this backend
 * holds already are renewed first, as a second redis_lock_acquire() renews
 * them; the others are taken together (acquire_all_in_redis()).
 */
static bool
acquire_lock_set(FunctionCallInfo fcinfo, bool session)
{
	int			ttl_ms = validated_ms(fcinfo, 1, false);
	int			wait_ms = validated_ms(fcinfo, 2, true);
	RedisConn  *conn;
	int			nkeys;
	KeyOfSet   *keys = key_set_arg(fcinfo, 0, &conn, &nkeys);
	HeldLock  **locks = palloc(sizeof(HeldLock *) * nkeys);
	HeldLock  **absent = palloc(sizeof(HeldLock *) * nkeys);
	int			nabsent = 0;
	int			i;

	check_ttl_for_server(conn, ttl_ms);
	for (i = 0; i < nkeys; i++)
	{
		HeldLock   *lock = find_lock(conn->serverid, keys[i].rkey,
									 keys[i].rkeylen, LOCK_MODE_EXCLUSIVE);

		check_kind(conn, keys[i].rkey, keys[i].rkeylen, LOCK_MODE_EXCLUSIVE);
		if (lock != NULL && total_holds(lock) > 0)
			(void) renew_held_lock(lock, ttl_ms, ERROR);
		else
		{
			lock = lock_to_await(lock, conn, keys[i].rkey, keys[i].rkeylen,
								 LOCK_MODE_EXCLUSIVE, session, 0);
			absent[nabsent++] = lock;
		}
		locks[i] = lock;
	}
	if (!acquire_all_in_redis(absent, nabsent, ttl_ms, wait_ms))
	{
		for (i = 0; i < nabsent; i++)
			remove_lock(absent[i]);
		return false;
	}
	for (i = 0; i < nabsent; i++)
		note_granted(absent[i]);
	for (i = 0; i < nkeys; i++)
		hold_granted(locks[i], session, 0);
	return true;
}

/*
 * redis_lock_acquire_all(keys, ttl_ms, wait_ms): every key locked until
 * the end of the transaction, or none
 */
Datum
redis_lock_acquire_all(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(acquire_lock_set(fcinfo, false));
}

/* redis_lock_acquire_all_session(keys, ttl_ms, wait_ms): until released */
Datum
redis_lock_acquire_all_session(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(acquire_lock_set(fcinfo, true));
}

/*
 * The WARNING of a release or an extend of the key argument, which this
 * backend does not hold in mode: as pg_advisory_unlock() does, an
 * exclusive release names the shared holds that it leaves alone.
 */
static void
warn_not_held(FunctionCallInfo fcinfo, LockMode mode)
{
	char	   *key = text_to_cstring(PG_GETARG_TEXT_PP(0));
	HeldLock   *reader = mode == LOCK_MODE_EXCLUSIVE ?
		lookup_key_arg(fcinfo, LOCK_MODE_SHARED, NULL, NULL, NULL) : NULL;

	if (mode == LOCK_MODE_SEMAPHORE)
		ereport(WARNING,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("you do not hold Redis semaphore \"%s\"", key)));
	else if (mode == LOCK_MODE_SHARED)
		ereport(WARNING,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("you do not hold Redis lock \"%s\" in shared mode",
						key)));
	else
		ereport(WARNING,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("you do not hold Redis lock \"%s\"", key),
				 reader != NULL && total_holds(reader) > 0 ?
				 errdetail("This session holds it in shared mode; redis_lock_release_shared() ends those holds.") : 0));
}

/*
 * End one hold of the key argument in mode; *permits receives the permits
 * of a semaphore's hold.  The last hold releases the lock in Redis, but
 * only if it is still ours (prepare_release()); any hold of a semaphore
 * gives back its permits there.  Local state changes only once Redis has
 * answered, so a failed release can be retried.
 */
static bool
release_lock(FunctionCallInfo fcinfo, LockMode mode, int *permits)
{
	HeldLock   *lock = lookup_key_arg(fcinfo, mode, NULL, NULL, NULL);
	RedisCall	call;
	bool		last;
	bool		released;

	if (lock == NULL || total_holds(lock) == 0)
	{
		warn_not_held(fcinfo, mode);
		return false;
	}
	last = total_holds(lock) == 1;
	*permits = permits_of_next_drop(lock);
	if (!last && mode != LOCK_MODE_SEMAPHORE)
	{
		drop_one_hold(lock);
		publish_lock(lock);
		return true;
	}

	if (last)
		prepare_release(&call, lock, true);
	else
		prepare_permit_release(&call, lock, lock->permits - *permits,
							   *permits, *permits, false);
	redis_run(&call, 1);
	released = (script_result(&call, user_key(lock)) == 1);
	if (!released)
		warn_lost(lock);
	if (last)
		remove_lock(lock);
	else
	{
		drop_one_hold(lock);
		publish_lock(lock);
	}
	return released;
}

/* redis_lock_release(key): end one exclusive hold */
Datum
redis_lock_release(PG_FUNCTION_ARGS)
{
	int			permits;

	PG_RETURN_BOOL(release_lock(fcinfo, LOCK_MODE_EXCLUSIVE, &permits));
}

/* redis_lock_release_shared(key): end one shared hold */
Datum
redis_lock_release_shared(PG_FUNCTION_ARGS)
{
	int			permits;

	PG_RETURN_BOOL(release_lock(fcinfo, LOCK_MODE_SHARED, &permits));
}

/*
 * Forget the locks of releases that got an answer, counting those that
 * Redis released and reporting those whose lease had been lost.  A lock
 * whose release got no answer is kept: Redis may still have it.  Returns
 * how many were released.
 */
static int
forget_released(RedisCall *calls, int ncalls)
{
	int			released = 0;
	int			i;
	int			j;

	for (i = 0; i < ncalls; i++)
	{
		for (j = 0; j < redis_call_nanswers(&calls[i]); j++)
		{
			RedisCall  *answer = redis_call_answer(&calls[i], j);
			HeldLock   *lock = (HeldLock *) answer->origin;

			if (answer->reply_type != REDIS_REPLY_INTEGER)
				continue;
			if (answer->integer == 1)
				released++;
			else if (total_holds(lock) > 0)
				warn_lost(lock);
			remove_lock(lock);
		}
	}
	return released;
}

/*
 * redis_lock_release_all(): end every hold, session and transaction alike,
 * in one round trip, and in one script call per Redis server where one
 * script may name all of its locks (queue_releases()).  Returns how many
 * keys were released; locks whose lease was lost are reported and not
 * counted.  The caller needs USAGE on every server involved.  When a
 * server fails, the locks that others released are forgotten before the
 * error is raised.
 */
Datum
redis_lock_release_all(PG_FUNCTION_ARGS)
{
	HASH_SEQ_STATUS status;
	HeldLock   *lock;
	HeldLock  **locks;
	int			nlocks = 0;
	RedisBatch	batch = {0};
	int			released;
	int			i;
	int			j;

	if (held_locks == NULL)
		PG_RETURN_INT32(0);

	locks = palloc(sizeof(HeldLock *) * Max(hash_get_num_entries(held_locks), 1));
	hash_seq_init(&status, held_locks);
	while ((lock = (HeldLock *) hash_seq_search(&status)) != NULL)
		if (total_holds(lock) > 0 || lock->in_redis)
			locks[nlocks++] = lock;
	if (nlocks == 0)
		PG_RETURN_INT32(0);
	queue_releases(&batch, locks, nlocks, true);
	for (i = 0; i < batch.ncalls; i++)
		redis_conn_check_usage(batch.calls[i].conn);

	PG_TRY();
	{
		redis_run(batch.calls, batch.ncalls);
	}
	PG_CATCH();
	{
		(void) forget_released(batch.calls, batch.ncalls);
		PG_RE_THROW();
	}
	PG_END_TRY();
	released = forget_released(batch.calls, batch.ncalls);
	for (i = 0; i < batch.ncalls; i++)
	{
		for (j = 0; j < redis_call_nanswers(&batch.calls[i]); j++)
		{
			RedisCall  *answer = redis_call_answer(&batch.calls[i], j);

			if (answer->reply_type != REDIS_REPLY_INTEGER)
				script_result(answer, user_key((HeldLock *) answer->origin));
		}
	}
	PG_RETURN_INT32(released);
}

/*
 * redis_lock_extend(key, ttl_ms): reset the lease of a held lock, only if
 * Redis shows it is still ours
 */
Datum
redis_lock_extend(PG_FUNCTION_ARGS)
{
	int			ttl_ms = validated_ms(fcinfo, 1, false);
	RedisConn  *conn;
	HeldLock   *lock = lookup_key_arg(fcinfo, LOCK_MODE_EXCLUSIVE, &conn, NULL,
									  NULL);

	check_ttl_for_server(conn, ttl_ms);
	if (lock == NULL || total_holds(lock) == 0)
	{
		warn_not_held(fcinfo, LOCK_MODE_EXCLUSIVE);
		PG_RETURN_BOOL(false);
	}
	if (!renew_held_lock(lock, ttl_ms, WARNING))
		PG_RETURN_BOOL(false);
	publish_lock(lock);
	ask_for_renewal(lock);
	PG_RETURN_BOOL(true);
}

/* redis_lock_fence(key): the fencing token of a held lock, else NULL */
Datum
redis_lock_fence(PG_FUNCTION_ARGS)
{
	HeldLock   *lock = lookup_key_arg(fcinfo, LOCK_MODE_EXCLUSIVE, NULL, NULL,
									  NULL);

	if (lock == NULL || total_holds(lock) == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(lock->fence);
}

/*
 * redis_fence_guard(key, stored): the fencing token of a held lock, for a
 * write that stores it beside the data the lock protects.  The database is
 * where that data lives, so the check belongs in the writing transaction:
 * a stored token larger than ours means a newer holder has written, and
 * our lease must have ended unnoticed (a pause, a partition), so the write
 * is refused with a serialization failure.  A NULL stored token means no
 * holder has written yet.
 */
Datum
redis_fence_guard(PG_FUNCTION_ARGS)
{
	HeldLock   *lock = lookup_key_arg(fcinfo, LOCK_MODE_EXCLUSIVE, NULL, NULL,
									  NULL);
	int64		stored = PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1);

	if (lock == NULL || total_holds(lock) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("you do not hold Redis lock \"%s\"",
						text_to_cstring(PG_GETARG_TEXT_PP(0))),
				 errhint("Acquire the lock before writing what it protects.")));
	if (stored > lock->fence)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("fencing token " INT64_FORMAT " of Redis lock \"%s\" is older than the stored token " INT64_FORMAT,
						lock->fence, user_key(lock), stored),
				 errdetail("A later holder of the lock has written since this backend acquired it.")));
	PG_RETURN_INT64(lock->fence);
}

/*
 * Take permits of a semaphore, as redis-semaphore's MultiSemaphore does,
 * for a session or a transaction hold.  Each acquire is a hold of its own,
 * with its permits; a backend that holds permits of the key already has
 * them confirmed and renewed first, as a second redis_lock_acquire()
 * renews a lock, and a refusal leaves them held.
 */
static bool
acquire_semaphore(FunctionCallInfo fcinfo, bool session)
{
	int			lim = validated_permits(fcinfo, 1, "lim", 0);
	int			permits = validated_permits(fcinfo, 2, "permits", lim);
	int			ttl_ms = validated_ms(fcinfo, 3, false);
	int			wait_ms = validated_ms(fcinfo, 4, true);
	RedisConn  *conn;
	char	   *rkey;
	int			rkeylen;
	HeldLock   *lock = lookup_key_arg(fcinfo, LOCK_MODE_SEMAPHORE, &conn,
									  &rkey, &rkeylen);

	check_kind(conn, rkey, rkeylen, LOCK_MODE_SEMAPHORE);
	check_ttl_for_server(conn, ttl_ms);
	if (lock != NULL && total_holds(lock) > 0)
		(void) renew_held_lock(lock, ttl_ms, ERROR);
	lock = lock_to_await(lock, conn, rkey, rkeylen, LOCK_MODE_SEMAPHORE,
						 session, permits);
	lock->limit = lim;
	if (!acquire_in_redis(lock, ttl_ms, wait_ms))
	{
		if (total_holds(lock) == 0)
			remove_lock(lock);
		else
		{
			lock->waiting_since = 0;
			publish_lock(lock);
		}
		return false;
	}
	note_granted(lock);
	hold_granted(lock, session, permits);
	return true;
}

/*
 * redis_semaphore_acquire(key, lim, permits, ttl_ms, wait_ms): permits of
 * a semaphore held until the end of the transaction (or of the savepoint
 * they were taken in, on rollback)
 */
Datum
redis_semaphore_acquire(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(acquire_semaphore(fcinfo, false));
}

/*
 * redis_semaphore_acquire_session(key, lim, permits, ttl_ms, wait_ms):
 * held until released
 */
Datum
redis_semaphore_acquire_session(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(acquire_semaphore(fcinfo, true));
}

/*
 * redis_semaphore_release(key): end one hold of a semaphore, a session
 * hold first, else the innermost transaction hold, and give its permits
 * back.  Returns the permits given back, 0 when they had expired or the
 * backend holds none.  The last hold gives back every permit the backend
 * may have left in Redis.
 */
Datum
redis_semaphore_release(PG_FUNCTION_ARGS)
{
	int			permits = 0;

	if (!release_lock(fcinfo, LOCK_MODE_SEMAPHORE, &permits))
		PG_RETURN_INT32(0);
	PG_RETURN_INT32(permits);
}
