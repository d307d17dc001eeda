/*-------------------------------------------------------------------------
 *
 * lease.c
 *		The lease of a held Redis lock: when it runs out, the call that
 *		renews it, and whether a renewal kept the lock.
 *
 * A lock's lease is its key's ttl.  The backend renews it when it acquires
 * the lock again, when redis_lock_extend() asks, and before commit
 * (redislock.verify_before_commit); with the preload, the lease watchdog
 * (worker/watchdog.c) renews it in between, with the same call
 * (lock_extend_call) and the same reckoning of when it runs out
 * (lock_lease_end), so that both judge a lease alike.  On a Redlock server
 * a lease is shorter by the clock drift its masters may have.  A renewal
 * whose answer came too late, or of a lease that the watchdog found lost,
 * did not keep the lock, whatever Redis says of the key now.
 *
 * The watchdog calls into this file, so it builds on held.c alone: never
 * on acquiring, the SQL functions or the worker.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lock/lock.h"
#include "scripts.h"

/*
 * When a lease of ttl_ms on conn's server, set or renewed by a call that
 * started at start, runs out.  On a Redlock server the masters' clocks may
 * drift apart, and the lease is shorter by what they may.  The lease
 * watchdog times its renewals with this too.
 */
TimestampTz
lock_lease_end(const RedisConn *conn, int ttl_ms, TimestampTz start)
{
	return TimestampTzPlusMilliseconds(start, ttl_ms -
									   redis_conn_drift_ms(conn, ttl_ms));
}

/* The lock's ttl and the time its lease, renewed from start, runs out */
void
set_lease(HeldLock *lock, int ttl_ms, TimestampTz start)
{
	lock->ttl_ms = ttl_ms;
	lock->lease_expires_at = lock_lease_end(lock->conn, ttl_ms, start);
}

/*
 * Did the reply of a call that renewed the lease of lock to ttl_ms, sent at
 * start, come while that lease was sure to be running?  A later reply
 * confirms nothing: the lease may have run out, and another client may have
 * taken the lock, before it came.
 */
bool
renewed_in_time(const HeldLock *lock, int ttl_ms, TimestampTz start)
{
	return GetCurrentTimestamp() < lock_lease_end(lock->conn, ttl_ms, start);
}

/*
 * Did a renewal of lock to ttl_ms, sent at start, keep it: did Redis find
 * the key still ours (renewed), in time, and has nobody found the lease
 * lost meanwhile?  The lease watchdog renews the lease while the backend
 * works, and marks it when a renewal finds it lost or too late, or when
 * it ran out unrenewed; a lease lost so was lost even where Redis says
 * the key is ours again.
 */
bool
renewal_kept_lock(const HeldLock *lock, bool renewed, int ttl_ms,
				  TimestampTz start)
{
	return renewed && renewed_in_time(lock, ttl_ms, start) &&
		!locktable_lease_lost(lock->shared);
}

/* The DETAIL of a renewal of lock that did not keep it */
int
errdetail_renewal_failed(const HeldLock *lock, bool renewed)
{
	if (renewed && locktable_lease_lost(lock->shared))
		return errdetail("The lease of the lock at %s was found lost earlier, while this backend held it.",
						 lock_endpoint(lock));
	if (renewed)
		return errdetail("Redis at %s confirmed the lease only when it may have run out already.",
						 lock_endpoint(lock));
	if (lock->mode == LOCK_MODE_SEMAPHORE)
		return errdetail("Permits of this backend at %s expired unrenewed while it held them.",
						 lock_endpoint(lock));
	return errdetail("The lock at %s expired or was taken by another client while this backend held it.",
					 lock_endpoint(lock));
}

/*
 * A lease of ttl_ms on a Redlock server must outlast the clock drift its
 * masters are allowed, or no grant or renewal could ever come in time.
 */
void
check_ttl_for_server(const RedisConn *conn, int ttl_ms)
{
	int			drift = redis_conn_drift_ms(conn, ttl_ms);

	if (ttl_ms <= drift)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl_ms must be greater than %d on Redlock server \"%s\"",
						drift, conn->servername),
				 errdetail("The masters' clocks may drift apart by 1%% of a lease plus 2 ms, which a lease of %d ms does not outlast.",
						   ttl_ms)));
}

/*
 * Make call the script that resets the lease of a lock, and of its fencing
 * token, to ttl_ms if the lock's key still carries token: for
 * redis_lock_extend(), the check before commit and the lease watchdog.
 * With hold_fence, the fencing token of a hold in digits, it renews only
 * that hold (extend_script says why).  The strings must outlive the call.
 */
void
lock_extend_call(RedisCall *call, RedisConn *conn, const char *rkey,
				 int rkeylen, int slot, const char *fence_key,
				 int fence_keylen, const char *token, int ttl_ms,
				 const char *hold_fence)
{
	redis_call_init(call, conn, &extend_script);
	call->slot = slot;
	call->nkeys = 2;
	redis_call_arg(call, rkey, rkeylen);
	redis_call_arg(call, fence_key, fence_keylen);
	redis_call_arg(call, token, strlen(token));
	redis_call_int_arg(call, ttl_ms);
	if (hold_fence != NULL)
		redis_call_arg(call, hold_fence, strlen(hold_fence));
}

/*
 * Start call, the script that renews what token holds at the sorted set
 * rkey (a semaphore's permits, a lock's reader): the key and the token
 * that both kinds of renewal begin with
 */
static void
sorted_set_renewal(RedisCall *call, RedisConn *conn,
				   const RedisScript *script, const char *rkey, int rkeylen,
				   int slot, const char *token)
{
	redis_call_init(call, conn, script);
	call->slot = slot;
	call->nkeys = 1;
	redis_call_arg(call, rkey, rkeylen);
	redis_call_arg(call, token, strlen(token));
}

/*
 * Make call the script that renews the permits numbered 0 to permits - 1
 * that token holds of a semaphore, to ttl_ms, if every one of them is still
 * there: for the same callers as lock_extend_call().  The strings must
 * outlive the call.
 */
void
semaphore_extend_call(RedisCall *call, RedisConn *conn, const char *rkey,
					  int rkeylen, int slot, const char *token, int permits,
					  int ttl_ms)
{
	sorted_set_renewal(call, conn, &semaphore_extend_script, rkey, rkeylen,
					   slot, token);
	redis_call_int_arg(call, permits);
	redis_call_int_arg(call, ttl_ms);
}

/*
 * Make call the script that renews the reader that token is of a lock held
 * in shared mode, to ttl_ms, if it still reads (or holds the key as its
 * writer): for the same callers as lock_extend_call().  The strings must
 * outlive the call.
 */
void
shared_extend_call(RedisCall *call, RedisConn *conn, const char *rkey,
				   int rkeylen, int slot, const char *token, int ttl_ms)
{
	sorted_set_renewal(call, conn, &shared_extend_script, rkey, rkeylen, slot,
					   token);
	redis_call_int_arg(call, ttl_ms);
}

/*
 * Make call the script that resets the lease of lock to ttl_ms if ours: a
 * lock's key, its reader, or a semaphore's permits
 */
void
prepare_extend(RedisCall *call, HeldLock *lock, int ttl_ms)
{
	if (lock->mode == LOCK_MODE_SEMAPHORE)
		semaphore_extend_call(call, lock->conn, lock->tag.key,
							  lock->tag.keylen, lock->slot,
							  conn_owner_token(lock->conn), lock->permits,
							  ttl_ms);
	else if (lock->mode == LOCK_MODE_SHARED)
		shared_extend_call(call, lock->conn, lock->tag.key, lock->tag.keylen,
						   lock->slot, conn_owner_token(lock->conn), ttl_ms);
	else
		lock_extend_call(call, lock->conn, lock->tag.key, lock->tag.keylen,
						 lock->slot, lock->fence_key, lock->fence_keylen,
						 conn_owner_token(lock->conn), ttl_ms, NULL);
	call->origin = lock;
}

/*
 * Confirm in Redis that a held lock is still ours and renew its lease to
 * ttl_ms, as redis_lock_extend() and acquiring a held lock do.  A lost
 * lease is reported at elevel, and false returned.  For an acquire it is
 * an error: the holds taken so far were not protected, and silently
 * re-taking the lock would hide that.
 */
bool
renew_held_lock(HeldLock *lock, int ttl_ms, int elevel)
{
	TimestampTz start = GetCurrentTimestamp();
	RedisCall	call;
	bool		renewed;

	prepare_extend(&call, lock, ttl_ms);
	redis_run(&call, 1);
	renewed = script_result(&call, user_key(lock)) == 1;
	if (!renewal_kept_lock(lock, renewed, ttl_ms, start))
	{
		note_lease_lost(lock);
		ereport(elevel,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 lock->mode == LOCK_MODE_SEMAPHORE ?
				 errmsg("lease of the permits of Redis semaphore \"%s\" on server \"%s\" was lost",
						user_key(lock), lock->conn->servername) :
				 errmsg("lease of Redis lock \"%s\" on server \"%s\" was lost",
						user_key(lock), lock->conn->servername),
				 errdetail_renewal_failed(lock, renewed),
				 elevel >= ERROR ?
				 errhint("Release the lock, then acquire it again; a longer ttl_ms may help.") : 0));
		return false;
	}
	set_lease(lock, ttl_ms, start);
	return true;
}
