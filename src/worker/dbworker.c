/*-------------------------------------------------------------------------
 *
 * dbworker.c
 *		A database's background worker: it renews the leases of the locks
 *		held there (watchdog.c), and listens for the releases that waiters
 *		there wait for (waker.c), while they ask for it.
 *
 * The launcher (launcher.c) starts the worker when work is asked for in
 * its database's slot of the workers' table (request.c); the worker takes
 * the work there, and exits once none is left.  Renewal comes first: the
 * worker that renews leases and wakes waiters does nothing else.
 *
 * A worker that locks of its database ask for (REDISLOCK_WORK_RENEW)
 * stays while they want their leases renewed (watchdog.c), and a little
 * longer, waking for each renewal; a backend granted such a lock wakes it
 * only when the worker would otherwise look too late.  Likewise, a worker
 * that waiters ask to listen for their locks' releases (REDISLOCK_WORK_WAKE,
 * waker.c) stays while they wait, and a little longer, waking for what
 * comes on its subscriptions as well as for its latch.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "worker/worker.h"

/*
 * A renewing worker looks at the leases at least this often, and stays
 * this long once no lease is left to renew (ms)
 */
#define RENEW_MAX_SLEEP_MS	1000
#define RENEW_LINGER_MS		10000

/*
 * A worker that listens for waiters looks at the lock table at least this
 * often, and stays this long once no waiter asks it to listen (ms)
 */
#define WAKE_MAX_SLEEP_MS	1000
#define WAKE_LINGER_MS		10000

/*
 * What a database's worker has to do: renew leases while locks here want
 * it, and listen for the releases that waiters here wait for
 */
typedef struct WorkerPlan
{
	bool		renewing;		/* renewal taken, and not given up */
	TimestampTz renew_at;		/* the next look at the leases, DT_NOEND
								 * when not renewing */
	TimestampTz idle_since;		/* no lease to renew since, 0 while some */
	bool		waking;			/* listening for waiters taken, and not
								 * given up */
	TimestampTz wake_idle_since;	/* no waiter to listen for since, 0
									 * while some */
} WorkerPlan;

/* Add to the plan the work asked for since the worker last looked */
static void
plan_taken_work(WorkerPlan *plan)
{
	uint32		work = worker_take_work();

	if (work & REDISLOCK_WORK_RENEW)
	{
		plan->renewing = true;
		plan->renew_at = 0;
	}
	if (work & REDISLOCK_WORK_WAKE)
		plan->waking = true;
}

/*
 * Stop renewing, no lease having wanted it for a while: renewal is done,
 * and a last look, with the request cleared, finds any lock granted before
 * (a lock granted later asks again).  False when that look found some.
 */
static bool
stop_renewing(WorkerPlan *plan)
{
	worker_work_done(REDISLOCK_WORK_RENEW);
	if (watchdog_renew_due_leases() == DT_NOEND)
		return true;
	worker_retake_work(REDISLOCK_WORK_RENEW);
	return false;
}

/*
 * Renew the leases that are due, and plan the next look: when the next
 * lease is due, and at least every RENEW_MAX_SLEEP_MS, so that a lock
 * granted meanwhile with a longer lease need not wake the worker.  While
 * the worker looks, and while it sleeps, the slot says until when, which
 * is what backends granted a lock read (redislock_request_renewal()).
 * The worker stays RENEW_LINGER_MS with no lease to renew, as locks come
 * and go.
 */
static void
renew_as_planned(WorkerPlan *plan)
{
	TimestampTz next;
	TimestampTz now;

	worker_set_renew_wake_at(0);
	pg_memory_barrier();
	next = watchdog_renew_due_leases();
	now = GetCurrentTimestamp();
	if (next != DT_NOEND)
		plan->idle_since = 0;
	else if (plan->idle_since == 0)
		plan->idle_since = now;
	else if (now >= TimestampTzPlusMilliseconds(plan->idle_since,
												RENEW_LINGER_MS) &&
			 stop_renewing(plan))
	{
		plan->renewing = false;
		plan->renew_at = DT_NOEND;
		return;
	}
	plan->renew_at = Min(next, TimestampTzPlusMilliseconds(now,
														   RENEW_MAX_SLEEP_MS));
	worker_set_renew_wake_at(plan->renew_at);
}

/*
 * Listen for the releases that the database's waiters wait for (waker.c),
 * while they ask for it, and WAKE_LINGER_MS longer; like renewal, the
 * request is cleared before a last look, so that a wait that asked
 * meanwhile is seen (a wait asks again at each of its requests).
 */
static void
wake_as_planned(WorkerPlan *plan)
{
	TimestampTz now;

	if (waker_serve() > 0)
	{
		plan->wake_idle_since = 0;
		return;
	}
	now = GetCurrentTimestamp();
	if (plan->wake_idle_since == 0)
		plan->wake_idle_since = now;
	else if (now >= TimestampTzPlusMilliseconds(plan->wake_idle_since,
												WAKE_LINGER_MS))
	{
		worker_work_done(REDISLOCK_WORK_WAKE);
		if (waker_serve() == 0)
		{
			plan->waking = false;
			return;
		}
		worker_retake_work(REDISLOCK_WORK_WAKE);
		plan->wake_idle_since = 0;
	}
}

/*
 * Sleep until the plan's next work is due, a request sets the latch, or
 * something comes on a subscription of the waiters'
 */
static void
sleep_as_planned(const WorkerPlan *plan)
{
	TimestampTz wake = plan->renew_at;
	long		timeout_ms;
	WaitEventSet *set;
	WaitEvent	event;

	if (plan->waking)
		wake = Min(wake, TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													 WAKE_MAX_SLEEP_MS));
	timeout_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), wake);
	set = compat_wait_set(false, 2 + (plan->waking ? waker_nsockets() : 0));
	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	if (plan->waking)
		waker_add_sockets(set);
	(void) WaitEventSetWait(set, Max(timeout_ms, 1), &event, 1,
							redislock_wait_event());
	FreeWaitEventSet(set);
	ResetLatch(MyLatch);
}

/*
 * A database's worker: it does the work asked for there, and exits when
 * none is left.  It does nothing else, so that no other work delays a
 * renewal: stock recovery has a worker of its own (recoverer.c).
 */
void
redislock_worker_main(Datum main_arg)
{
	Oid			dboid = DatumGetObjectId(main_arg);
	WorkerPlan	plan = {0};
	MemoryContext work_cxt;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	if (!worker_attach_slot(dboid))
		proc_exit(0);
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);

	plan.renew_at = DT_NOEND;
	work_cxt = AllocSetContextCreate(TopMemoryContext, "redislock worker",
									 ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(work_cxt);
	for (;;)
	{
		MemoryContextReset(work_cxt);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		plan_taken_work(&plan);
		if (!plan.renewing && !plan.waking)
			break;
		if (plan.renewing && plan.renew_at <= GetCurrentTimestamp())
			renew_as_planned(&plan);
		if (plan.waking)
			wake_as_planned(&plan);
		if (plan.renewing || plan.waking)
			sleep_as_planned(&plan);
	}
	proc_exit(0);
}
