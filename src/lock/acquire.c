/*-------------------------------------------------------------------------
 *
 * acquire.c
 *		Taking a Redis lock: one attempt, and the waits between attempts.
 *
 * An attempt runs the acquire script, which sets the lock's key to our
 * owner token and counts its fencing token up, or, when refused, tells how
 * long the holder's lease still runs and whether the holder announces its
 * release.  A wait for the lock has four parts: with the preload, its turn
 * in the local queue of the shared lock table, so that local waiters ask
 * Redis in the order they came; listening for the lock's releases, through
 * the database's worker (worker/waker.c) or on a subscription of its own
 * (wake.c), from before the attempt that may queue it; the waiters' queue
 * in Redis, where our releases wake the first in line; and polling with
 * capped, jittered backoff for the releases that nobody announces, never
 * past the holder's lease.  Every sleep is a latch wait that services
 * interrupts, so cancel, statement_timeout and lock_timeout end a wait
 * promptly.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"

#include "lock/lock.h"
#include "scripts.h"
#include "stats.h"
#include "worker/worker.h"

/*
 * Backoff between attempts while waiting for a lock, in ms; a wait that
 * hears our releases polls at the longest, for other clients' releases
 */
#define WAIT_MIN_DELAY_MS	1
#define WAIT_MAX_DELAY_MS	50

/* The longest sleep of a wait that hears keyspace events too, in ms */
#define WAIT_KEYSPACE_MAX_MS	1000

/*
 * The deadline of one attempt at taking a lock: command_timeout, or the
 * end of lock_timeout (counted from the start of the wait) when that comes
 * first and wait_ms does not end the wait before it.
 */
static RedisDeadline
attempt_deadline(TimestampTz start, int wait_ms)
{
	RedisDeadline deadline = redis_command_deadline();

	if (LockTimeout > 0 && (wait_ms < 0 || LockTimeout < wait_ms))
	{
		TimestampTz lock_end = TimestampTzPlusMilliseconds(start, LockTimeout);

		if (lock_end < deadline.at)
		{
			deadline.at = lock_end;
			deadline.ms = LockTimeout;
			deadline.lock_timeout = true;
			deadline.from_first_byte = false;
		}
	}
	return deadline;
}

/*
 * The counter of redis_stats() for what befell an acquire of lock: stat
 * (an acquire, a wait, a timeout), which counts exclusive locks, or its
 * twin of the lock's mode, which follows the same order
 */
static RedisStat
kind_stat(const HeldLock *lock, RedisStat stat)
{
	Assert(stat == REDIS_STAT_ACQUIRES || stat == REDIS_STAT_ACQUIRE_WAITS ||
		   stat == REDIS_STAT_ACQUIRE_TIMEOUTS);
	if (lock->mode == LOCK_MODE_SEMAPHORE)
		return REDIS_STAT_SEMAPHORE_ACQUIRES + (stat - REDIS_STAT_ACQUIRES);
	if (lock->mode == LOCK_MODE_SHARED)
		return REDIS_STAT_SHARED_ACQUIRES + (stat - REDIS_STAT_ACQUIRES);
	return stat;
}

/*
 * Nothing of lock is in Redis any more, after an attempt that did not
 * take it, but the permits of a semaphore's holds
 */
static void
note_not_taken(HeldLock *lock)
{
	lock->in_redis = total_holds(lock) > 0;
}

/*
 * Make call the release of what an attempt may have left in Redis: the
 * lock, or the permits asked for above those held
 */
static void
prepare_attempt_release(RedisCall *call, HeldLock *lock, bool leave_queue)
{
	if (lock->mode == LOCK_MODE_SEMAPHORE)
		prepare_permit_release(call, lock, lock->permits, lock->wait_permits,
							   0, leave_queue);
	else
		prepare_release(call, lock, leave_queue);
}

/*
 * Delete a lock just taken, and its fencing token, or give back the
 * permits just taken, because too few replicas acknowledged them; then
 * report that.
 */
static void
abandon_lock(HeldLock *lock, const RedisCall *wait)
{
	RedisCall	call;

	if (lock->mode != LOCK_MODE_EXCLUSIVE || other_mode_holds(lock))
		prepare_attempt_release(&call, lock, false);
	else
	{
		lock_call_init(&call, lock, &abandon_script);
		add_lock_keys(&call, lock);
		add_token_arg(&call);
		add_queue_args(&call, lock);
	}
	redis_run(&call, 1);
	script_result(&call, user_key(lock));
	note_not_taken(lock);
	redis_report_replicas(wait, user_key(lock),
						  lock->mode == LOCK_MODE_SEMAPHORE ?
						  "the permits were given back" :
						  "the lock was released");
}

/*
 * Release, without waiting for the answer, what an acquire may have left
 * in Redis though it is not taken: granted too late for its lease, or
 * granted by too few of a quorum's masters.  The release goes to every
 * master, answered or not, and runs after the acquire on each.  A wait
 * that gives up leaves the waiters' queue with it (leave_queue).
 */
static void
release_not_taken(HeldLock *lock, bool leave_queue)
{
	RedisCall	call;

	prepare_attempt_release(&call, lock, leave_queue);
	redis_send_deferred(&call, 1);
	if (leave_queue)
		lock->queued = false;
}

/*
 * What a refused attempt tells of the lock: how long its holder's lease
 * still runs (-1 when unknown: no lease, or a quorum's refusal), and
 * whether the holder is one of ours, whose release is announced.
 */
typedef struct Refusal
{
	long		lease_ms;
	bool		holder_announces;
} Refusal;

/* Read a refusal of the acquire script: -1 - (2 * PTTL + foreign), or 0 */
static void
read_refusal(long long answer, Refusal *refusal)
{
	long long	encoded = -1 - answer;

	refusal->lease_ms = -1;
	refusal->holder_announces = false;
	if (answer >= 0)
		return;
	if (encoded / 2 < PG_INT32_MAX)
		refusal->lease_ms = (long) (encoded / 2);
	refusal->holder_announces = encoded % 2 == 0;
}

/*
 * Make call the acquire script of lock, but for the waiter's arguments: a
 * lock's, in its mode, or a semaphore's, which asks for the permits wanted
 * above those held, and may leave them behind from then on
 * (permits_reserved)
 */
static void
prepare_acquire_call(RedisCall *call, HeldLock *lock, int ttl_ms)
{
	if (lock->mode == LOCK_MODE_SEMAPHORE)
	{
		lock_call_init(call, lock, &semaphore_acquire_script);
		call->nkeys = 1;
		add_lock_key(call, lock);
		redis_call_int_arg(call, lock->limit);
		redis_call_int_arg(call, lock->wait_permits);
		add_token_arg(call);
		redis_call_int_arg(call, lock->permits);
		redis_call_int_arg(call, ttl_ms);
		add_queue_args(call, lock);
		lock->permits_reserved = Max(lock->permits_reserved,
									 lock->permits + lock->wait_permits);
		return;
	}
	if (lock->mode == LOCK_MODE_SHARED)
	{
		lock_call_init(call, lock, &shared_acquire_script);
		call->nkeys = 1;
		add_lock_key(call, lock);
	}
	else
	{
		lock_call_init(call, lock, &acquire_script);
		add_lock_keys(call, lock);
	}
	add_token_arg(call);
	redis_call_int_arg(call, ttl_ms);
	add_queue_args(call, lock);
}

/*
 * Make the calls of one attempt at taking the lock in Redis: the acquire
 * script, and with the server's min_replicas the WAIT for its replicas in
 * the same round trip (calls has room for two).  A waiter that hears our
 * releases is queued when refused (queue), at the front when a release
 * woke it (front).  Returns the number of calls.
 */
static int
prepare_attempt(RedisCall *calls, HeldLock *lock, int ttl_ms, bool queue,
				bool front)
{
	RedisCall  *call = &calls[0];
	int			ncalls = 1;

	prepare_acquire_call(call, lock, ttl_ms);
	if (queue)
	{
		redis_call_arg(call, lock->wake_channel, lock->wake_channellen);
		if (front)
			redis_call_arg(call, "front", 5);
	}
	if (lock->conn->min_replicas > 0)
		redis_call_wait_replicas(&calls[ncalls++], call);

	lock->in_redis = true;		/* from here on the outcome may be unknown */
	if (queue)
		lock->queued = true;
	return ncalls;
}

/*
 * Make the calls of one attempt at taking the n locks of locks[] that
 * order[] names, all on one server and in one script group
 * (order_by_script_group()), as prepare_attempt() makes them for one lock:
 * the set's acquire script, whose parts answer for each lock, and the WAIT
 * for replicas after it.  A set attempt never queues.  Returns the number
 * of calls.
 */
static int
prepare_set_attempt(RedisCall *calls, HeldLock **locks, const int *order,
					int n, int ttl_ms)
{
	RedisCall  *call = &calls[0];
	RedisCall  *parts;
	int			ncalls = 1;
	int			i;

	lock_call_init(call, locks[order[0]], &acquire_set_script);
	for (i = 0; i < n; i++)
		add_lock_keys(call, locks[order[i]]);
	add_token_arg(call);
	redis_call_int_arg(call, ttl_ms);
	for (i = 0; i < n; i++)
		redis_call_arg(call, locks[order[i]]->handoff_key,
					   locks[order[i]]->handoff_keylen);
	parts = redis_call_add_parts(call, n);
	for (i = 0; i < n; i++)
	{
		parts[i].origin = locks[order[i]];
		locks[order[i]]->in_redis = true;	/* the outcome may be unknown */
	}
	if (call->conn->min_replicas > 0)
		redis_call_wait_replicas(&calls[ncalls++], call);
	return ncalls;
}

/*
 * Take what an attempt started at start answered for the lock (answer, and
 * the WAIT for replicas after it, or NULL): true when the lock was taken.
 * Too few replicas acknowledging it is an error, after the lock is
 * released again; *refusal tells what a refusal said of the holder.  An
 * answer nil, of a set's attempt, says that the lock was not taken because
 * another lock of the set was not: nothing was written.
 */
static bool
take_attempt(HeldLock *lock, RedisCall *call, RedisCall *wait, int ttl_ms,
			 TimestampTz start, Refusal *refusal)
{
	bool		granted = lock->mode == LOCK_MODE_EXCLUSIVE ?
		call->reply_type == REDIS_REPLY_STRING :
		call->reply_type == REDIS_REPLY_INTEGER && call->integer == 1;

	if (granted && redis_conn_decides_by_quorum(lock->conn) &&
		!renewed_in_time(lock, ttl_ms, start))
	{
		/*
		 * A quorum granted it too late for its lease: as Redlock has it, that
		 * is no grant (elsewhere the check before commit judges the lease)
		 */
		release_not_taken(lock, false);
		note_not_taken(lock);
		read_refusal(0, refusal);
		return false;
	}
	if (!granted)
	{
		/* known outcome: not taken (the scripts write only when granting) */
		if (redis_conn_decides_by_quorum(lock->conn))
			release_not_taken(lock, false);
		note_not_taken(lock);
		read_refusal(call->reply_type == REDIS_REPLY_NIL ? 0 :
					 script_result(call, user_key(lock)), refusal);
		return false;
	}
	lock->queued = false;
	if (wait != NULL && !redis_replicas_acknowledged(wait))
		abandon_lock(lock, wait);
	if (lock->mode == LOCK_MODE_EXCLUSIVE)
		lock->fence = pg_strtoint64(call->str);
	lock->acquired_at = start;
	set_lease(lock, ttl_ms, start);
	redis_count(lock->conn, kind_stat(lock, REDIS_STAT_ACQUIRES), 1);
	return true;
}

/* One attempt at taking the lock in Redis: true when taken */
static bool
try_acquire(HeldLock *lock, int ttl_ms, RedisDeadline deadline,
			bool queue, bool front, Refusal *refusal)
{
	TimestampTz start = GetCurrentTimestamp();
	RedisCall	calls[2];
	int			ncalls = prepare_attempt(calls, lock, ttl_ms, queue, front);

	redis_run_until(calls, ncalls, deadline, ERROR);
	return take_attempt(lock, &calls[0], ncalls > 1 ? &calls[1] : NULL,
						ttl_ms, start, refusal);
}

/* Count a wait for a lock that ended: its time, and whether it ran out */
static void
count_wait(HeldLock *lock, long waited_ms, bool timed_out)
{
	redis_count(lock->conn, REDIS_STAT_WAIT_MS, waited_ms);
	if (timed_out)
		redis_count(lock->conn, kind_stat(lock, REDIS_STAT_ACQUIRE_TIMEOUTS),
					1);
}

/* Count the first wait of an acquire, once */
static void
note_waiting(HeldLock *lock, bool *waited)
{
	if (!*waited)
		redis_count(lock->conn, kind_stat(lock, REDIS_STAT_ACQUIRE_WAITS), 1);
	*waited = true;
}

/*
 * How long a wait for lock that started at start may go on, in *left_ms
 * (-1: no limit).  lock_timeout is enforced here, as for a lock wait.
 * Returns false when wait_ms has run out.
 */
static bool
wait_time_left(HeldLock *lock, TimestampTz start, int wait_ms, long *left_ms)
{
	long		elapsed = TimestampDifferenceMilliseconds(start,
														  GetCurrentTimestamp());
	long		limit = -1;
	bool		lock_timeout_limits = false;

	if (wait_ms > 0)
		limit = wait_ms;
	if (LockTimeout > 0 && (limit < 0 || LockTimeout < limit))
	{
		limit = LockTimeout;
		lock_timeout_limits = true;
	}

	if (limit >= 0 && elapsed >= limit)
	{
		count_wait(lock, elapsed, true);
		if (lock_timeout_limits)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("canceling statement due to lock timeout"),
					 errdetail("Waited %ld ms for Redis lock \"%s\" of server \"%s\" at %s.",
							   elapsed, user_key(lock), lock->conn->servername,
							   lock_endpoint(lock))));
		return false;
	}
	*left_ms = limit >= 0 ? limit - elapsed : -1;
	return true;
}

/*
 * How long to sleep before the next attempt, unless a release wakes us.
 * A wait that hears our releases polls only for other clients' releases:
 * every WAIT_MAX_DELAY_MS, or never before the lease ends when keyspace
 * events tell of those too.  Otherwise capped exponential backoff with
 * jitter, so that pollers do not hammer Redis in step.  Nobody sleeps past
 * the end of the holder's lease.  A semaphore's waiter does not count on
 * keyspace events, which tell of permits given back only where the server
 * publishes sorted sets' events too.
 */
static long
sleep_before_retry(const HeldLock *lock, int hears, const Refusal *refusal,
				   int *delay_ms)
{
	long		sleep_ms;

	if ((hears & WAKE_KEYSPACE) && lock->mode != LOCK_MODE_SEMAPHORE)
		sleep_ms = WAIT_KEYSPACE_MAX_MS;
	else if (hears & WAKE_ANNOUNCED)
		sleep_ms = WAIT_MAX_DELAY_MS;
	else
	{
		sleep_ms = *delay_ms / 2 +
			(long) (compat_random_fraction() * (*delay_ms / 2 + 1));
		*delay_ms = Min(*delay_ms * 2, WAIT_MAX_DELAY_MS);
	}
	if (refusal->lease_ms >= 0)
		sleep_ms = Min(sleep_ms, refusal->lease_ms + 1);
	return sleep_ms;
}

/* The worker need listen no more for this wait */
static void
end_worker_listen(HeldLock *lock)
{
	locktable_wake_end(lock->shared);
	lock->wake_request = 0;
	lock->wake_worker = 0;
}

/* The wait ended, granted or not: stop listening for the lock's releases */
static void
stop_listening(HeldLock *lock, bool granted)
{
	if (lock->wake_request != 0)
		end_worker_listen(lock);
	else
		wake_end(lock->conn, granted);
}

/*
 * Ask the database's worker to listen for the releases of the lock on this
 * backend's behalf (waker.c), so that the server's waits share its
 * subscriptions instead of opening one each: what the wait hears, as
 * wake_subscribe() returns it, once the worker has subscribed; -1 when it
 * cannot (no preload, a key the lock table cuts, no worker running yet,
 * or no answer by the deadline): the backend then subscribes itself.
 */
static int
ask_worker_to_listen(HeldLock *lock, RedisDeadline deadline)
{
	uint32		asked;
	int			worker;
	int			hears;

	if (lock->shared.index < 0 || lock->tag.keylen > REDISLOCK_ENTRY_KEY_LEN)
		return -1;
	worker = redislock_worker_pid(MyDatabaseId);
	if (worker == 0)
	{
		(void) redislock_request_worker(MyDatabaseId, REDISLOCK_WORK_WAKE);
		return -1;
	}
	asked = locktable_wake_ask(lock->shared);
	(void) redislock_request_worker(MyDatabaseId, REDISLOCK_WORK_WAKE);
	while ((hears = locktable_wake_answer(lock->shared, asked)) < 0)
	{
		long		left_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
															  deadline.at);

		if (left_ms <= 0 || redislock_worker_pid(MyDatabaseId) != worker)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 left_ms, redislock_wait_event());
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	if (hears < 0 || (hears & WAKE_LOST))
	{
		end_worker_listen(lock);
		return -1;
	}
	lock->wake_request = asked;
	lock->wake_worker = worker;
	return hears;
}

/*
 * Listen for the releases of the lock before an attempt that may queue
 * this backend: through the worker when it can, else on a subscription of
 * this backend's own (wake.c), which a wait through the worker closes.
 */
static int
listen_for_release(HeldLock *lock, RedisDeadline deadline)
{
	int			hears = ask_worker_to_listen(lock, deadline);

	if (hears >= 0)
	{
		wake_close(lock->conn);
		return hears;
	}
	return wake_subscribe(lock->conn, lock->tag.key, lock->tag.keylen,
						  lock->wake_channel, lock->wake_channellen, deadline);
}

/*
 * Does a subscription listen for the releases of the lock already, so that
 * an attempt may queue this backend at once?  The worker's listens for as
 * long as it runs and has not lost it.
 */
static bool
listening_for_release(HeldLock *lock)
{
	if (lock->wake_request != 0)
	{
		int			hears = locktable_wake_answer(lock->shared,
												  lock->wake_request);

		if (hears >= 0 && !(hears & WAKE_LOST) &&
			redislock_worker_pid(MyDatabaseId) == lock->wake_worker)
			return true;
		end_worker_listen(lock);
		return false;
	}
	return wake_listening(lock->conn, lock->tag.key, lock->tag.keylen,
						  lock->wake_channel, lock->wake_channellen);
}

/*
 * Wait up to timeout_ms for a release of the lock, as wake_wait() does.
 * Through the worker, it is a latch wait, which the worker's setting of
 * the latch ends; a worker that stopped, or lost its subscription, counts
 * as a release heard: the waiter looks again, and listens anew.
 */
static WakeCause
wait_for_release(HeldLock *lock, long timeout_ms, bool holder_announces)
{
	if (lock->wake_request == 0)
		return wake_wait(lock->conn, timeout_ms, holder_announces);
	locktable_wake_holder_announces(lock->shared, holder_announces);
	if (!locktable_wake_take_heard(lock->shared) && listening_for_release(lock))
	{
		int			events = WaitLatch(MyLatch,
									   WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
									   timeout_ms, redislock_wait_event());

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (!locktable_wake_take_heard(lock->shared) &&
			listening_for_release(lock))
			return (events & WL_TIMEOUT) ? WAKE_TIMEOUT : WAKE_LATCH;
	}
	return WAKE_RELEASED;
}

/*
 * Sleep before the next attempt, or until a release wakes us (*woken).
 * The latch wakes us for query cancel and statement_timeout, for a local
 * holder's release, and for a look at the lock.  Returns false when
 * wait_ms has run out.
 */
static bool
wait_before_retry(HeldLock *lock, TimestampTz start, int wait_ms,
				  long sleep_ms, bool holder_announces, bool *woken)
{
	long		left_ms;

	if (!wait_time_left(lock, start, wait_ms, &left_ms))
		return false;
	if (left_ms >= 0)
		sleep_ms = Min(sleep_ms, left_ms);
	*woken = wait_for_release(lock, Max(sleep_ms, 1),
							  holder_announces) == WAKE_RELEASED;
	return true;
}

/*
 * With the preload, wait until it is this backend's turn to ask Redis for
 * the lock: no local backend that came before still waits.  Returns false
 * when the wait ran out first.
 */
static bool
wait_for_turn(HeldLock *lock, TimestampTz start, int wait_ms, bool *waited)
{
	long		left_ms = 0;

	while (!locktable_wait_turn(lock->shared, left_ms))
	{
		if (wait_ms == 0)
			return false;
		note_waiting(lock, waited);
		if (!wait_time_left(lock, start, wait_ms, &left_ms))
			return false;
	}
	return true;
}

/*
 * Wait for the lock in Redis as wait_ms says, after a first refusal.  The
 * waiter subscribes to what wakes it (wake.c) and tries again at once, so
 * that a release between its first attempt and its subscription is not
 * missed; from then on each refusal queues it, and a release wakes it.
 * A waiter still subscribed from its last wait for the same lock was
 * queued by its first attempt already.  A subscription lost meanwhile (a
 * slot moved, a failover) is made again where the key is served now.
 * With the preload, each attempt waits for its local turn first.
 */
static bool
wait_in_redis(HeldLock *lock, int ttl_ms, int wait_ms, TimestampTz start,
			  int hears, Refusal *refusal, bool *waited)
{
	int			delay_ms = WAIT_MIN_DELAY_MS;
	bool		woken = false;
	bool		subscribed = hears != 0;

	note_waiting(lock, waited);
	for (;;)
	{
		if (!subscribed)
		{
			hears = listen_for_release(lock, attempt_deadline(start, wait_ms));
			subscribed = true;
		}
		else
		{
			if ((hears & WAKE_ANNOUNCED) && !listening_for_release(lock))
				hears = listen_for_release(lock,
										   attempt_deadline(start, wait_ms));
			if (!wait_before_retry(lock, start, wait_ms,
								   sleep_before_retry(lock, hears, refusal,
													  &delay_ms),
								   refusal->holder_announces, &woken))
				break;
		}
		if (!wait_for_turn(lock, start, wait_ms, waited))
			break;
		if (try_acquire(lock, ttl_ms, attempt_deadline(start, wait_ms),
						(hears & WAKE_ANNOUNCED) != 0, woken, refusal))
		{
			stop_listening(lock, true);
			return true;
		}
	}
	stop_listening(lock, false);
	return false;
}

/*
 * Take the lock in Redis, waiting as wait_ms says.  An error while waiting
 * (cancel, a timeout) closes the subscriptions: this backend is in the
 * waiters' queue, and a release must not announce itself to it.  A wait
 * that gives up leaves the queue, at once or, after an error, when the
 * (sub)transaction ends: a release may have announced itself to it just
 * before, and the next waiter is then woken instead.
 */
bool
acquire_in_redis(HeldLock *lock, int ttl_ms, int wait_ms)
{
	TimestampTz start = GetCurrentTimestamp();
	Refusal		refusal;
	int			hears = 0;
	bool		waited = false;
	bool		taken = false;

	redis_connect(lock->conn, lock->tag.key, lock->tag.keylen, lock->slot);
	if (!wait_for_turn(lock, start, wait_ms, &waited))
		return false;
	if (wait_ms == 0)
		return try_acquire(lock, ttl_ms, attempt_deadline(start, wait_ms),
						   false, false, &refusal);
	make_wake_channel(lock);
	if (listening_for_release(lock))
		hears = WAKE_ANNOUNCED;
	PG_TRY();
	{
		taken = try_acquire(lock, ttl_ms, attempt_deadline(start, wait_ms),
							hears != 0, false, &refusal) ||
			wait_in_redis(lock, ttl_ms, wait_ms, start, hears, &refusal,
						  &waited);
	}
	PG_CATCH();
	{
		end_worker_listen(lock);
		wake_close(lock->conn);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!taken && lock->queued)
		release_not_taken(lock, true);
	if (taken && waited)
		count_wait(lock, TimestampDifferenceMilliseconds(start,
														 GetCurrentTimestamp()),
				   false);
	return taken;
}

/*
 * One attempt at every lock of locks[] that is not taken[]: their calls go
 * out together, in one round trip over every node they live on, a script
 * call for the locks that one script may name together (a set's acquire
 * script, which takes them all or none) and a call of its own for a lock
 * that goes alone.  Marks those taken, and returns the index of the first
 * one refused, or -1 when none was.
 */
static int
attempt_all(HeldLock **locks, bool *taken, int nlocks, int ttl_ms,
			RedisDeadline deadline)
{
	TimestampTz start = GetCurrentTimestamp();
	RedisCall  *calls = palloc(sizeof(RedisCall) * 2 * nlocks);
	RedisCall **answers = palloc0(sizeof(RedisCall *) * nlocks);
	RedisCall **waits = palloc0(sizeof(RedisCall *) * nlocks);
	int		   *order = palloc(sizeof(int) * nlocks);
	int			norder = 0;
	int			ncalls = 0;
	int			refused = -1;
	int			untaken = -1;
	int			n;
	int			i;
	int			j;

	for (i = 0; i < nlocks; i++)
		if (!taken[i])
			order[norder++] = i;
	order_by_script_group(locks, order, norder, false);
	for (i = 0; i < norder; i += n)
	{
		RedisCall  *call = &calls[ncalls];

		n = script_group_size(locks, order + i, norder - i, false);
		if (n == 1)
			ncalls += prepare_attempt(call, locks[order[i]], ttl_ms,
									  false, false);
		else
			ncalls += prepare_set_attempt(call, locks, order + i, n, ttl_ms);
		for (j = 0; j < n; j++)
		{
			answers[order[i + j]] = n == 1 ? call : &call->parts[j];
			waits[order[i + j]] = call + 1 < &calls[ncalls] ? call + 1 : NULL;
		}
	}
	redis_run_until(calls, ncalls, deadline, ERROR);
	for (i = 0; i < nlocks; i++)
	{
		Refusal		refusal;

		if (taken[i])
			continue;
		taken[i] = take_attempt(locks[i], answers[i], waits[i], ttl_ms, start,
								&refusal);
		if (taken[i])
			continue;
		if (untaken < 0)
			untaken = i;
		/* nil: not refused, but not taken with the lock of its set that was */
		if (refused < 0 && answers[i]->reply_type != REDIS_REPLY_NIL)
			refused = i;
	}
	pfree(calls);
	pfree(answers);
	pfree(waits);
	pfree(order);
	return refused >= 0 ? refused : untaken;
}

/*
 * Release, in one round trip, the locks of locks[] that taken[] marks, and
 * unmark them: an attempt that did not take them all keeps none.  A lock
 * whose release got no answer may still be in Redis, and stays marked so
 * (in_redis) for the transaction end to release.
 */
static void
release_taken(HeldLock **locks, bool *taken, int nlocks)
{
	HeldLock  **release = palloc(sizeof(HeldLock *) * nlocks);
	RedisBatch	batch = {0};
	int			nrelease = 0;
	int			i;
	int			j;

	for (i = 0; i < nlocks; i++)
		if (taken[i])
			release[nrelease++] = locks[i];
	if (nrelease > 0)
	{
		queue_releases(&batch, release, nrelease, false);
		(void) redis_run_until(batch.calls, batch.ncalls,
							   redis_command_deadline(), ERROR);
	}
	for (i = 0; i < batch.ncalls; i++)
	{
		for (j = 0; j < redis_call_nanswers(&batch.calls[i]); j++)
		{
			RedisCall  *answer = redis_call_answer(&batch.calls[i], j);

			if (answer->reply_type == REDIS_REPLY_INTEGER)
				((HeldLock *) answer->origin)->in_redis = false;
		}
	}
	memset(taken, 0, sizeof(bool) * nlocks);
	pfree(release);
}

/*
 * What is left of wait_ms, which started at start, for the next wait: -1
 * for no limit, 0 when it has run out.
 */
static int
wait_ms_left(int wait_ms, TimestampTz start)
{
	long		elapsed;

	if (wait_ms < 0)
		return -1;
	elapsed = TimestampDifferenceMilliseconds(start, GetCurrentTimestamp());
	return elapsed >= wait_ms ? 0 : (int) (wait_ms - elapsed);
}

/*
 * Take every lock of locks[] in Redis, or none, waiting as wait_ms says:
 * true when all are taken.  Each attempt asks for every lock not taken
 * yet in one round trip, over every node they live on, in one script call
 * for the locks that one script may name together (all of them on a
 * Redis without cluster mode, those of one slot on a Cluster), which
 * takes them all or none,
 * and a call per lock where each goes alone (a Redlock server's, every
 * master deciding each lock by its quorum).  When one is refused, those
 * taken by other calls are released again before anything waits, so that
 * a waiter holds none of them and two sets taken in opposite orders cannot
 * wait for each other.  The wait is for the first lock refused, taken as a single
 * lock is (its local turn, its wake-ups, its place in the waiters' queue),
 * after which the others are asked for again.
 */
bool
acquire_all_in_redis(HeldLock **locks, int nlocks, int ttl_ms, int wait_ms)
{
	TimestampTz start = GetCurrentTimestamp();
	bool	   *taken = palloc0(sizeof(bool) * nlocks);
	bool		all = false;

	for (;;)
	{
		int			refused = attempt_all(locks, taken, nlocks, ttl_ms,
										  attempt_deadline(start, wait_ms));
		int			left_ms;

		if (refused < 0)
		{
			all = true;
			break;
		}
		release_taken(locks, taken, nlocks);
		left_ms = wait_ms_left(wait_ms, start);
		if (left_ms == 0)
		{
			/* a wait that ran out between two attempts ran out all the same */
			if (wait_ms != 0)
				redis_count(locks[refused]->conn, REDIS_STAT_ACQUIRE_TIMEOUTS, 1);
			break;
		}
		if (!acquire_in_redis(locks[refused], ttl_ms, left_ms))
			break;
		taken[refused] = true;
	}
	pfree(taken);
	return all;
}
