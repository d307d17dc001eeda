/*-------------------------------------------------------------------------
 *
 * launcher.c
 *		The launcher of a preloaded redislock's background workers: it
 *		starts the worker of each database whose locks ask for one
 *		(dbworker.c), and the stock recoveries (recoverer.c), one at a time.
 *
 * The launcher, connected to no database, is woken by the requests made
 * in the workers' table (request.c), starts the workers that are due
 * there, and watches them; it is registered at _PG_init, restarted when it
 * fails, and, as every process, after a crash.
 *
 * Renewal comes first: the worker that renews leases and wakes waiters does
 * nothing else.  Stock recovery may be long (it SCANs every key), wait for
 * a lock, or fail for ever (a server that the bootstrap superuser has no
 * user mapping for), so it runs in a recovery worker of its own, and its
 * failures and pauses are its own: they never delay the start of a
 * renewing worker, nor its renewals.  The launcher keeps the databases due
 * for recovery in a queue, in its own memory, and runs one recovery at a
 * time for the whole server, one database after another; a database whose
 * recovery failed (Redis unreachable) goes to the back of the queue, to be
 * tried again after a pause that doubles each time.  It asks for recovery
 * in every database that takes connections when it starts on a primary
 * (with the server, or again after a crash), at a promotion, and every
 * redislock.recover_interval after; a reload reschedules that only when
 * the interval changed.  A recovery in a database without the extension
 * finds nothing to do.
 *
 * On a hot standby, locks are taken as on a primary, and their leases are
 * renewed and their waiters woken the same way, as nothing of that writes
 * to PostgreSQL: the launcher and the database workers start once the
 * standby is consistent.  Recovery, which writes, waits for a promotion.
 *
 * DROP DATABASE, and the other commands that need a database to
 * themselves, wait a few seconds for its connections to leave and then
 * fail; the launcher watches for them and terminates a worker in their
 * way, the recovery worker included, as those commands themselves
 * terminate autovacuum workers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "guc.h"
#include "worker/worker.h"

/*
 * The pause before the first new try of a failed recovery, and the
 * longest; and the same for a database worker that stopped with work left
 * (it failed to start, or was terminated), which locks wait for
 */
#define FIRST_RETRY_MS		1000
#define LAST_RETRY_MS		30000
#define FIRST_RESTART_MS	100
#define LAST_RESTART_MS		1000

/*
 * How often the launcher looks for commands that need a worker's database,
 * and, on a standby, for a promotion
 */
#define WATCH_MS			500

/* The launcher's restart after it exits with an error, in seconds */
#define LAUNCHER_RESTART_S	5

/* A database whose recovery the launcher has yet to run */
typedef struct PendingRecovery
{
	Oid			dboid;
	int			failures;		/* tries that failed */
	TimestampTz not_before;		/* no try before this */
} PendingRecovery;

/*
 * The launcher's starts of workers, per slot, and of the recovery worker,
 * until they stopped; and its queue of recoveries, PendingRecovery *
 */
static BackgroundWorkerHandle **launches = NULL;
static BackgroundWorkerHandle *recovery_launch = NULL;
static List *pending = NIL;

/*
 * A worker of this library that connects to a database, started once a
 * standby is consistent: nothing but recovery writes, which asks for more
 */
static void
define_worker(BackgroundWorker *worker, const char *function, const char *type)
{
	memset(worker, 0, sizeof(BackgroundWorker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker->bgw_start_time = BgWorkerStart_ConsistentState;
	worker->bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker->bgw_library_name, "redislock", BGW_MAXLEN);
	strlcpy(worker->bgw_function_name, function, BGW_MAXLEN);
	strlcpy(worker->bgw_type, type, BGW_MAXLEN);
	strlcpy(worker->bgw_name, type, BGW_MAXLEN);
}

/*
 * Register the launcher; called from _PG_init
 * while shared_preload_libraries is processed.  The launcher is restarted
 * when it fails, and, as every process, after a crash.
 */
void
redislock_init_worker(void)
{
	BackgroundWorker launcher;

	define_worker(&launcher, "redislock_launcher_main", "redislock launcher");
	launcher.bgw_restart_time = LAUNCHER_RESTART_S;
	RegisterBackgroundWorker(&launcher);
}

/*
 * The pause before the next start of work, which has already been tried
 * that many times without success: from first, doubling, up to last (ms)
 */
static int
retry_pause_ms(int attempts, int first, int last)
{
	return Min(first << Min(attempts, 16), last);
}

/*
 * Is a command under way that needs the database to itself: DROP
 * DATABASE, ALTER DATABASE RENAME or SET TABLESPACE, or CREATE DATABASE
 * copying it?  Each holds a lock on the database that conflicts with the
 * one a new connection takes, waits a few seconds for the connections
 * there to leave, and fails if one is left.
 */
static bool
database_claimed(Oid dboid)
{
	LOCKTAG		tag;

	SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, dboid, 0);
	if (LockAcquire(&tag, RowExclusiveLock, true, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, RowExclusiveLock, true);
	return false;
}

/*
 * The databases that a worker may connect to, in the current memory
 * context.  pg_database is shared, so the launcher reads it without a
 * database of its own.
 */
static List *
connectable_databases(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *dbs = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;

	StartTransactionCommand();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tuple);

		if (db->datallowconn && !database_is_invalid_form(db))
		{
			MemoryContext oldcxt = MemoryContextSwitchTo(cxt);

			dbs = lappend_oid(dbs, db->oid);
			MemoryContextSwitchTo(oldcxt);
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	return dbs;
}

/* Forget the starts whose worker has stopped, or never started */
static void
forget_stopped_launches(void)
{
	int			i;

	for (i = 0; i < worker_nslots(); i++)
	{
		pid_t		pid;

		if (launches[i] != NULL &&
			GetBackgroundWorkerPid(launches[i], &pid) == BGWH_STOPPED)
		{
			pfree(launches[i]);
			launches[i] = NULL;
		}
	}
}

/* Terminate the worker pid of dboid if a command needs that database */
static void
terminate_in_the_way(pid_t pid, Oid dboid)
{
	if (pid == 0 || !database_claimed(dboid))
		return;
	ereport(DEBUG1,
			(errmsg_internal("terminating redislock worker %d of database %u for a command that needs the database",
							 (int) pid, dboid)));
	(void) kill(pid, SIGTERM);
}

/*
 * Terminate the workers whose database a command needs to itself.  Their
 * work stays asked for: the database may be renamed or copied, not
 * dropped.
 */
static void
terminate_workers_in_the_way(void)
{
	WorkerSlotCopy slot;
	RecoveryCopy recovery;
	int			i;

	for (i = 0; i < worker_nslots(); i++)
	{
		worker_read_slot(i, &slot);
		terminate_in_the_way(slot.pid, slot.dboid);
	}
	worker_read_recovery(&recovery);
	terminate_in_the_way(recovery.pid, recovery.dboid);
}

/*
 * Start a worker that the launcher watches, in handle; false, with a
 * WARNING, when no background worker slot is free
 */
static bool
launch(BackgroundWorker *worker, BackgroundWorkerHandle **handle)
{
	worker->bgw_notify_pid = MyProcPid;
	if (RegisterDynamicBackgroundWorker(worker, handle))
		return true;
	ereport(WARNING,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("could not start %s: out of background worker slots",
					worker->bgw_name),
			 errhint("You might need to increase max_worker_processes.")));
	return false;
}

/* Start the worker of a database in slot i */
static void
start_worker(int i, Oid dboid)
{
	BackgroundWorker worker;

	define_worker(&worker, "redislock_worker_main", "redislock worker");
	snprintf(worker.bgw_name, BGW_MAXLEN, "redislock worker for database %u",
			 dboid);
	worker.bgw_main_arg = ObjectIdGetDatum(dboid);
	(void) launch(&worker, &launches[i]);
}

/*
 * Start the worker of slot i, copied in slot, whose work is due, unless
 * its database is gone or taken by a command.  The next start, if this
 * one fails, waits longer, but never long, as locks wait for it: returns
 * when it may be, DT_NOEND when the slot was freed.
 */
static TimestampTz
start_due_worker(int i, const WorkerSlotCopy *slot, List *dbs,
				 TimestampTz now)
{
	TimestampTz not_before;

	if (!list_member_oid(dbs, slot->dboid))
	{
		ereport(DEBUG1,
				(errmsg_internal("redislock forgets database %u, which no longer takes connections",
								 slot->dboid)));
		worker_free_slot(i, slot->dboid);
		return DT_NOEND;
	}

	not_before = TimestampTzPlusMilliseconds(now,
											 retry_pause_ms(slot->attempts,
															FIRST_RESTART_MS,
															LAST_RESTART_MS));
	worker_postpone_slot(i, not_before);

	if (!database_claimed(slot->dboid))
		start_worker(i, slot->dboid);
	return not_before;
}

/*
 * Start the workers that are due: work asked for, no worker, and the pause
 * after the last start over.  Returns how long the launcher may sleep
 * before it must look again, -1 for as long as nothing wakes it.
 */
static long
start_due_workers(void)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz next = DT_NOEND;
	WorkerSlotCopy *due = palloc0(sizeof(WorkerSlotCopy) * worker_nslots());
	bool		any_due = false;
	bool		any_running = false;
	int			i;

	forget_stopped_launches();
	for (i = 0; i < worker_nslots(); i++)
	{
		WorkerSlotCopy slot;

		worker_read_slot(i, &slot);
		if (slot.pid != 0 || launches[i] != NULL)
			any_running = true;
		else if (OidIsValid(slot.dboid) && slot.work != 0)
		{
			if (slot.not_before <= now)
			{
				due[i] = slot;
				any_due = true;
			}
			else
				next = Min(next, slot.not_before);
		}
	}

	if (any_due)
	{
		List	   *dbs = connectable_databases();

		for (i = 0; i < worker_nslots(); i++)
		{
			TimestampTz not_before;

			if (!OidIsValid(due[i].dboid))
				continue;
			not_before = start_due_worker(i, &due[i], dbs, now);
			next = Min(next, not_before);
			any_running |= launches[i] != NULL;
		}
		list_free(dbs);
	}
	pfree(due);

	if (any_running)
		next = Min(next, TimestampTzPlusMilliseconds(now, WATCH_MS));
	if (next == DT_NOEND)
		return -1;
	return Max(TimestampDifferenceMilliseconds(now, next), 1);
}

/* The sooner of two sleeps in ms, -1 standing for no end */
static long
sooner(long a, long b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return Min(a, b);
}

/* The queued recovery of dboid, NULL when none is */
static PendingRecovery *
find_pending(Oid dboid)
{
	ListCell   *lc;

	foreach(lc, pending)
	{
		PendingRecovery *p = lfirst(lc);

		if (p->dboid == dboid)
			return p;
	}
	return NULL;
}

/*
 * Queue a recovery in every database that takes connections; a database
 * queued already keeps its place and its pause
 */
static void
queue_recoveries(void)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	List	   *dbs = connectable_databases();
	ListCell   *lc;

	foreach(lc, dbs)
	{
		PendingRecovery *p;

		if (find_pending(lfirst_oid(lc)) != NULL)
			continue;
		p = palloc0(sizeof(PendingRecovery));
		p->dboid = lfirst_oid(lc);
		pending = lappend(pending, p);
	}
	list_free(dbs);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * A recovery failed, or could not start: its database goes to the back of
 * the queue, so that the others have their turn, and waits longer
 */
static void
recovery_failed(PendingRecovery *p, TimestampTz now)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopMemoryContext);

	p->not_before = TimestampTzPlusMilliseconds(now,
												retry_pause_ms(p->failures++,
															   FIRST_RETRY_MS,
															   LAST_RETRY_MS));
	pending = list_delete_ptr(pending, p);
	pending = lappend(pending, p);
	MemoryContextSwitchTo(oldcxt);
}

/* A recovery is over or gone: its database leaves the queue */
static void
recovery_over(PendingRecovery *p)
{
	pending = list_delete_ptr(pending, p);
	pfree(p);
}

/*
 * Once the recovery worker that the launcher started has stopped, take
 * what it said: its database leaves the queue if it recovered every
 * server, and is tried again later if not (it failed, or was terminated)
 */
static void
take_recovery_outcome(TimestampTz now)
{
	pid_t		pid;
	RecoveryCopy recovery;
	PendingRecovery *p;

	if (recovery_launch == NULL ||
		GetBackgroundWorkerPid(recovery_launch, &pid) != BGWH_STOPPED)
		return;
	pfree(recovery_launch);
	recovery_launch = NULL;
	worker_read_recovery(&recovery);
	if ((p = find_pending(recovery.dboid)) == NULL)
		return;
	if (recovery.recovered)
		recovery_over(p);
	else
		recovery_failed(p, now);
}

/*
 * Start the recovery of the database whose turn it is, unless it no
 * longer takes connections (it leaves the queue) or a command has it (it
 * waits, as after a failure)
 */
static void
start_recovery(PendingRecovery *p, TimestampTz now)
{
	BackgroundWorker worker;
	List	   *dbs = connectable_databases();
	bool		gone = !list_member_oid(dbs, p->dboid);

	list_free(dbs);
	if (gone)
	{
		recovery_over(p);
		return;
	}
	if (database_claimed(p->dboid))
	{
		recovery_failed(p, now);
		return;
	}
	define_worker(&worker, "redislock_recovery_main", "redislock recovery");
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	snprintf(worker.bgw_name, BGW_MAXLEN,
			 "redislock recovery for database %u", p->dboid);
	worker.bgw_main_arg = ObjectIdGetDatum(p->dboid);
	worker_recovery_starts(p->dboid);
	if (!launch(&worker, &recovery_launch))
		recovery_failed(p, now);
}

/*
 * Run the recoveries: one at a time, on a primary, the first database of
 * the queue whose pause is over next.  Returns how long the launcher may
 * sleep before it must look again, -1 for as long as nothing wakes it.
 */
static long
start_due_recovery(void)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz next = DT_NOEND;
	RecoveryCopy recovery;
	ListCell   *lc;

	take_recovery_outcome(now);
	worker_read_recovery(&recovery);
	if (recovery.pid != 0 || recovery_launch != NULL)
		return WATCH_MS;
	if (RecoveryInProgress())
		return -1;
	foreach(lc, pending)
	{
		PendingRecovery *p = lfirst(lc);

		if (p->not_before <= now)
		{
			start_recovery(p, now);
			return recovery_launch != NULL ? WATCH_MS : 1;
		}
		next = Min(next, p->not_before);
	}
	if (next == DT_NOEND)
		return -1;
	return Max(TimestampDifferenceMilliseconds(now, next), 1);
}

/*
 * When the next recovery in every database is due: a crash is not the only
 * way records are left (a give-back that could not reach Redis), and the
 * rows of decrements whose records are gone pile up until a recovery
 * deletes them.
 */
static TimestampTz
sweep_after(TimestampTz now)
{
	if (redislock_recover_interval == 0)
		return DT_NOEND;
	return TimestampTzPlusMilliseconds(now, redislock_recover_interval);
}

/* The launcher's sleep, timeout (-1: none), cut to the sweep when due */
static long
until_sweep(long timeout, TimestampTz next_sweep)
{
	if (next_sweep == DT_NOEND)
		return timeout;
	return sooner(timeout,
				  Max(TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
													  next_sweep), 1));
}

/*
 * The launcher.  On a primary, it queues a recovery in every database, at
 * its start (or at the promotion of the standby it started on) and every
 * recover_interval; it starts workers as they are asked for and due, and
 * the recoveries one at a time, and watches those that run.  It sleeps on
 * its latch, which requests, its workers' starts and exits (the
 * postmaster signals it), SIGHUP and SIGTERM set; on a standby, it also
 * looks for a promotion every WATCH_MS.
 */
void
redislock_launcher_main(Datum main_arg)
{
	bool		primary = false;
	int			interval = redislock_recover_interval;
	TimestampTz next_sweep = DT_NOEND;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	launches = MemoryContextAllocZero(TopMemoryContext,
									  sizeof(BackgroundWorkerHandle *) *
									  worker_nslots());
	worker_attach_launcher();

	for (;;)
	{
		long		timeout;
		TimestampTz now = GetCurrentTimestamp();

		if (!primary && !RecoveryInProgress())
		{
			primary = true;
			next_sweep = now;
		}
		if (now >= next_sweep)
		{
			queue_recoveries();
			next_sweep = sweep_after(now);
		}
		terminate_workers_in_the_way();
		timeout = sooner(start_due_workers(), start_due_recovery());
		timeout = until_sweep(timeout, next_sweep);
		if (!primary)
			timeout = sooner(timeout, WATCH_MS);
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_EXIT_ON_PM_DEATH |
						 (timeout >= 0 ? WL_TIMEOUT : 0),
						 timeout, redislock_wait_event());
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			/* only a new interval moves the next sweep */
			if (redislock_recover_interval != interval && primary)
				next_sweep = sweep_after(GetCurrentTimestamp());
			interval = redislock_recover_interval;
		}
	}
}

