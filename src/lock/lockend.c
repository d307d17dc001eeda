/*-------------------------------------------------------------------------
 *
 * lockend.c
 *		What the end of a transaction, of a subtransaction and of the
 *		backend does to the Redis locks held; xact.c calls these.
 *
 * Before commit, every lock held for the transaction is confirmed ours,
 * its lease renewed, in one round trip per server; a lost one turns the
 * commit into an abort.  When the transaction ends its transaction holds
 * end, when a subtransaction rolls back the holds taken inside it, and at
 * backend exit the session holds too.  The locks left without holds go
 * into the batch of releases that xact.c runs, in one script call for the
 * locks of a server that one script may name together (all of them on a
 * Redis without cluster mode, each lock alone elsewhere), and are
 * forgotten once it has run.  But for backend exit, only the locks the transaction touched
 * are visited, so that the session locks a backend holds cost its
 * transactions nothing here.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "lock/lock.h"

bool
locks_have_xact_holds(void)
{
	dlist_iter	iter;

	dlist_foreach(iter, &touched_locks)
		if (dlist_container(HeldLock, xact_link, iter.cur)->xact_holds > 0)
			return true;
	return false;
}

/*
 * Before commit, confirm in one round trip per server that every lock held
 * for the transaction is still ours, renewing each lease so that it covers
 * the commit.  A lost lock turns the commit into an abort: the transaction
 * ran without the protection it asked for.
 */
void
locks_verify_before_commit(void)
{
	TimestampTz start;
	dlist_iter	iter;
	HeldLock   *lock;
	RedisCall  *calls;
	int			ncalls = 0;
	int			i;

	dlist_foreach(iter, &touched_locks)
		ncalls++;
	if (ncalls == 0)
		return;

	calls = palloc(sizeof(RedisCall) * ncalls);
	ncalls = 0;
	dlist_foreach(iter, &touched_locks)
	{
		lock = dlist_container(HeldLock, xact_link, iter.cur);
		if (lock->xact_holds > 0)
			prepare_extend(&calls[ncalls++], lock, lock->ttl_ms);
	}
	if (ncalls == 0)
		return;

	start = GetCurrentTimestamp();
	redis_run(calls, ncalls);
	for (i = 0; i < ncalls; i++)
	{
		bool		renewed;

		lock = (HeldLock *) calls[i].origin;
		renewed = script_result(&calls[i], user_key(lock)) == 1;
		if (!renewal_kept_lock(lock, renewed, lock->ttl_ms, start))
		{
			/*
			 * Reported here, so the abort's release keeps quiet; it still
			 * deletes the key where it carries our token (a minority of a
			 * Redlock server's masters may)
			 */
			lock->loss_reported = true;
			note_lease_lost(lock);
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 lock->mode == LOCK_MODE_SEMAPHORE ?
					 errmsg("permits of Redis semaphore \"%s\" on server \"%s\" were lost before commit",
							user_key(lock), lock->conn->servername) :
					 errmsg("Redis lock \"%s\" on server \"%s\" was lost before commit",
							user_key(lock), lock->conn->servername),
					 errdetail_renewal_failed(lock, renewed),
					 errhint("Retry the transaction; a longer ttl_ms may help.")));
		}
		set_lease(lock, lock->ttl_ms, start);
	}
}

/*
 * A batched release has run: report each lock whose lease had been lost,
 * and forget the locks.  A failure to reach Redis was reported by
 * redis_run(); the lease then ends the lock at its expiry.
 */
static void
release_done(RedisCall *call)
{
	int			i;

	for (i = 0; i < redis_call_nanswers(call); i++)
	{
		RedisCall  *answer = redis_call_answer(call, i);
		HeldLock   *lock = (HeldLock *) answer->origin;

		if (answer->reply_type == REDIS_REPLY_INTEGER &&
			answer->integer == 0 && lock->acquired_at != 0 &&
			!lock->loss_reported)
			warn_lost(lock);
		else if (answer->reply_type != REDIS_REPLY_INTEGER &&
				 answer->reply_type != 0)
			redis_unexpected_reply(answer, user_key(lock), WARNING);
		remove_lock(lock);
	}
}

/*
 * A batched give-back of some of a semaphore's permits has run: report
 * them lost when they had expired.  The semaphore stays, with its other
 * holds.
 */
static void
permits_release_done(RedisCall *call)
{
	HeldLock   *lock = (HeldLock *) call->origin;

	if (call->reply_type == REDIS_REPLY_INTEGER && call->integer == 0)
		warn_lost(lock);
	else if (call->reply_type != REDIS_REPLY_INTEGER && call->reply_type != 0)
		redis_unexpected_reply(call, user_key(lock), WARNING);
}

/*
 * The permits of a semaphore's holds that end while others stay, which
 * drop_permit_holds() has just forgotten: queue their give-back, the top
 * `dropped` of the backend's members.  A give-back that gets no reply
 * leaves them to expire, since renewals cover the permits held only.
 */
static void
queue_permits_release(RedisBatch *batch, HeldLock *lock, int dropped)
{
	RedisCall  *call = redis_batch_add(batch);

	publish_lock(lock);
	prepare_permit_release(call, lock, lock->permits, dropped, dropped,
						   false);
	call->on_reply = permits_release_done;
}

/*
 * The locks that an end releases, gathered while their holds end, so that
 * their releases go out in as few calls as their servers allow
 */
typedef struct EndReleases
{
	HeldLock  **locks;
	int			nlocks;
} EndReleases;

/* Room for the releases of every lock that the transaction touched */
static void
start_releases(EndReleases *releases)
{
	dlist_iter	iter;
	int			n = 0;

	dlist_foreach(iter, &touched_locks)
		n++;
	releases->locks = palloc(sizeof(HeldLock *) * Max(n, 1));
	releases->nlocks = 0;
}

/*
 * Release a lock that has no holds left, if Redis may have it; forget it
 * at once otherwise.  The shared lock table shows it without holds before
 * the batch goes out, however long the batch then takes (a slow server
 * elsewhere): the lease watchdog renews it no more, and a local waiter
 * takes the DEL of its key for this release, not another client's.
 */
static void
release_if_unheld(EndReleases *releases, HeldLock *lock)
{
	if (total_holds(lock) > 0)
		return;
	if (lock->in_redis || lock->queued)
	{
		publish_lock(lock);
		releases->locks[releases->nlocks++] = lock;
	}
	else
		remove_lock(lock);
}

/*
 * Does the release of this shared hold go with its exclusive twin's, which
 * ends in the same end?  The key is then our string, which the exclusive
 * release deletes: a release of the shared hold after it would find the
 * key gone and take its lease for lost.
 */
static bool
ends_with_exclusive(const HeldLock *lock)
{
	HeldLock   *writer;

	if (lock->mode != LOCK_MODE_SHARED)
		return false;
	writer = find_lock(lock->tag.serverid, lock->tag.key, lock->tag.keylen,
					   LOCK_MODE_EXCLUSIVE);
	return writer != NULL && total_holds(writer) == 0 &&
		(writer->in_redis || writer->queued);
}

/*
 * Queue the releases gathered in the batch; a shared hold released with
 * its exclusive twin is forgotten at once
 */
static void
queue_end_releases(RedisBatch *batch, EndReleases *releases)
{
	int			first = batch->ncalls;
	int			n = 0;
	int			i;

	for (i = 0; i < releases->nlocks; i++)
	{
		if (ends_with_exclusive(releases->locks[i]))
			remove_lock(releases->locks[i]);
		else
			releases->locks[n++] = releases->locks[i];
	}
	releases->nlocks = n;
	if (releases->nlocks > 0)
		queue_releases(batch, releases->locks, releases->nlocks, true);
	for (i = first; i < batch->ncalls; i++)
		batch->calls[i].on_reply = release_done;
	pfree(releases->locks);
}

/*
 * At transaction end every transaction hold ends, and the locks whose last
 * hold that was are released; at backend exit (session_too) every session
 * hold as well.
 */
void
locks_end_xact(RedisBatch *batch, bool session_too)
{
	dlist_mutable_iter miter;
	EndReleases releases;

	if (session_too && held_locks != NULL)
	{
		HASH_SEQ_STATUS status;
		HeldLock   *lock;

		hash_seq_init(&status, held_locks);
		while ((lock = (HeldLock *) hash_seq_search(&status)) != NULL)
		{
			lock->session_holds = 0;
			touch_lock(lock);
		}
	}
	start_releases(&releases);
	dlist_foreach_modify(miter, &touched_locks)
	{
		HeldLock   *lock = dlist_container(HeldLock, xact_link, miter.cur);
		int			dropped = 0;

		if (lock->mode == LOCK_MODE_SEMAPHORE && lock->xact_holds > 0 &&
			lock->session_holds > 0)
			dropped = drop_permit_holds(lock, 1);
		lock->xact_holds = 0;
		lock->nlevels = 0;
		untouch_lock(lock);
		if (dropped > 0)
			queue_permits_release(batch, lock, dropped);
		else if (total_holds(lock) > 0)
			publish_lock(lock);
		release_if_unheld(&releases, lock);
	}
	queue_end_releases(batch, &releases);
}

/*
 * At the end of a subtransaction at nesting level `level`, its holds pass
 * to the parent on commit and end on rollback.
 */
void
locks_end_subxact(RedisBatch *batch, int level, bool commit)
{
	dlist_mutable_iter miter;
	EndReleases releases;

	start_releases(&releases);
	dlist_foreach_modify(miter, &touched_locks)
	{
		HeldLock   *lock = dlist_container(HeldLock, xact_link, miter.cur);
		LevelHolds *top = lock->nlevels > 0 ? &lock->levels[lock->nlevels - 1] : NULL;

		if (top != NULL && top->level == level)
		{
			if (!commit)
			{
				int			dropped = 0;

				if (lock->mode == LOCK_MODE_SEMAPHORE &&
					total_holds(lock) > top->count)
					dropped = drop_permit_holds(lock, level);
				lock->xact_holds -= top->count;
				lock->nlevels--;
				if (dropped > 0)
					queue_permits_release(batch, lock, dropped);
				else if (total_holds(lock) > 0)
					publish_lock(lock);
			}
			else
			{
				if (lock->mode == LOCK_MODE_SEMAPHORE)
					pass_permit_holds(lock, level);
				if (lock->nlevels > 1 && top[-1].level == level - 1)
				{
					top[-1].count += top->count;
					lock->nlevels--;
				}
				else
					top->level = level - 1;
			}
		}
		if (!commit)
			release_if_unheld(&releases, lock);
	}
	queue_end_releases(batch, &releases);
}
