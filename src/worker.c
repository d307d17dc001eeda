/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The background workers of a preloaded redislock: a launcher, and a
 *		worker per database that the launcher starts on demand.
 *
 * Foreign servers and user mappings live in each database's catalog, so
 * work on Redis is done by a worker connected to the database whose
 * servers it concerns.  The launcher, connected to no database, starts
 * those workers: a small table in shared memory holds, per database, the
 * work asked for, the worker attached, and when the next start may be.
 * Any process may ask for work there (redislock_request_worker()), and
 * setting the launcher's latch wakes it to start the worker.
 *
 * When the launcher starts (with the server, or again after a crash), it
 * asks for stock recovery in every database that takes connections: the
 * decrements that transactions ended by a crash left open are settled as
 * redis_stock_recover() settles them.  A worker in a database without the
 * extension finds nothing to do.  Work that fails (Redis unreachable) is
 * tried again by a new worker, after a pause that doubles each time.
 *
 * A worker that locks of its database ask for (REDISLOCK_WORK_RENEW)
 * stays while they want their leases renewed (watchdog.c), and a little
 * longer, waking for each renewal; a backend granted such a lock wakes it
 * only when the worker would otherwise look too late.  Likewise, a worker
 * that waiters ask to listen for their locks' releases (REDISLOCK_WORK_WAKE,
 * waker.c) stays while they wait, and a little longer, waking for what
 * comes on its subscriptions as well as for its latch.  Otherwise a worker
 * holds its database only while it works, and never across a pause
 * between two tries of failed work.  DROP DATABASE, and the other
 * commands that need a database to themselves, wait a few seconds for its
 * connections to leave and then fail; the launcher watches for them and
 * terminates a worker in their way, as those commands themselves
 * terminate autovacuum workers.
 *
 * After a crash the postmaster makes shared memory anew: nothing from
 * before is kept, and the launcher, restarted, begins again.
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
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "redislock.h"
#include "worker.h"

/* The pause before the first new try of failed work, and the longest */
#define FIRST_RETRY_MS		1000
#define LAST_RETRY_MS		30000

/* redislock.recover_interval: ms between two recoveries, 0 for none */
static int	recover_interval_ms = 300000;

/* How often the launcher looks for commands that need a worker's database */
#define WATCH_MS			500

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

/* The launcher's restart after it exits with an error, in seconds */
#define LAUNCHER_RESTART_S	5

/* A database with work asked for, or a worker */
typedef struct WorkerSlot
{
	Oid			dboid;			/* InvalidOid when the slot is free */
	uint32		work;			/* REDISLOCK_WORK_* asked for */
	uint32		taken;			/* what of it the worker attached does */
	pid_t		pid;			/* the worker attached, 0 when none */
	Latch	   *latch;			/* and its latch, NULL when none */
	pg_atomic_uint64 renew_wake_at; /* when the worker, renewing, next looks
									 * at the leases; 0 while it looks */
	int			attempts;		/* starts since the work last succeeded */
	TimestampTz not_before;		/* no start before this */
} WorkerSlot;

typedef struct WorkerState
{
	slock_t		mutex;
	Latch	   *launcher_latch; /* NULL while no launcher runs */
	int			nslots;
	WorkerSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} WorkerState;

/* What one recovery of a server found */
typedef struct RecoverySummary
{
	int64		given;			/* decrements given back */
	int64		units;			/* and their units */
	char	   *items;			/* "key (units), ...", NULL when none */
	int64		failed;			/* records that Redis refused to settle */
	int64		undecided;		/* records that cannot be decided here */
} RecoverySummary;

/*
 * The summary of redis_stock_recover() on the server of redislock.server:
 * its outcomes are documented; "in progress" belongs to a live transaction
 */
#define RECOVER_QUERY \
	"WITH r AS (SELECT key, qty, outcome FROM %s.redis_stock_recover()), " \
	"back AS (SELECT key, sum(qty) AS units FROM r " \
	"         WHERE outcome = 'aborted' GROUP BY key) " \
	"SELECT (SELECT count(*) FROM r WHERE outcome = 'aborted'), " \
	"       (SELECT coalesce(sum(units), 0)::bigint FROM back), " \
	"       (SELECT string_agg(key || ' (' || units || ')', ', ' ORDER BY key) FROM back), " \
	"       (SELECT count(*) FROM r WHERE outcome LIKE '%% failed'), " \
	"       (SELECT count(*) FROM r WHERE outcome NOT IN " \
	"          ('aborted', 'committed', 'in progress', 'give-back failed', 'clear failed'))"

/*
 * The extension's schema and the servers of its foreign data wrapper, one
 * row per server; none when the extension is not installed
 */
#define SERVERS_QUERY \
	"SELECT n.nspname, s.srvname FROM pg_catalog.pg_extension e " \
	"JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace " \
	"LEFT JOIN pg_catalog.pg_foreign_data_wrapper w ON w.fdwname = 'redislock' " \
	"LEFT JOIN pg_catalog.pg_foreign_server s ON s.srvfdw = w.oid " \
	"WHERE e.extname = 'redislock' ORDER BY s.srvname"

static WorkerState *state = NULL;

#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* The launcher's starts of workers, per slot, until they stopped */
static BackgroundWorkerHandle **launches = NULL;

/* A worker's slot, and its database's name for messages */
static WorkerSlot *my_slot = NULL;
static char *my_dbname = NULL;

static Size
worker_state_size(void)
{
	return add_size(offsetof(WorkerState, slots),
					mul_size(max_worker_processes, sizeof(WorkerSlot)));
}

static void
worker_shmem_request(void)
{
#if PG_VERSION_NUM >= 150000
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
#endif
	RequestAddinShmemSpace(worker_state_size());
}

/*
 * Make the table, empty: a slot per database with work or a worker, as
 * many as workers can run at once.  At a restart after a crash the
 * postmaster makes all shared memory anew and comes here again, so that
 * nothing from before the crash survives.
 */
static void
worker_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	state = ShmemInitStruct("redislock worker", worker_state_size(), &found);
	if (!found)
	{
		int			i;

		memset(state, 0, worker_state_size());
		SpinLockInit(&state->mutex);
		state->nslots = max_worker_processes;
		for (i = 0; i < state->nslots; i++)
			pg_atomic_init_u64(&state->slots[i].renew_wake_at, 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* A worker of this library that connects to a database of a primary */
static void
define_worker(BackgroundWorker *worker, const char *function, const char *type)
{
	memset(worker, 0, sizeof(BackgroundWorker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker->bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker->bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker->bgw_library_name, "redislock", BGW_MAXLEN);
	strlcpy(worker->bgw_function_name, function, BGW_MAXLEN);
	strlcpy(worker->bgw_type, type, BGW_MAXLEN);
	strlcpy(worker->bgw_name, type, BGW_MAXLEN);
}

/*
 * Register the launcher and ask for the shared table; called from _PG_init
 * while shared_preload_libraries is processed.  The launcher is restarted
 * when it fails, and, as every process, after a crash.
 */
void
redislock_init_worker(void)
{
	BackgroundWorker launcher;

	DefineCustomIntVariable("redislock.recover_interval",
							"Time between two stock recoveries by the background worker.",
							"Besides the recovery at server start and after a crash, the worker recovers stock in every database this often, which also deletes the rows of decrements whose records are gone; 0 recovers only at start.",
							&recover_interval_ms,
							300000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	define_worker(&launcher, "redislock_launcher_main", "redislock launcher");
	launcher.bgw_restart_time = LAUNCHER_RESTART_S;
	RegisterBackgroundWorker(&launcher);

#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = worker_shmem_request;
#else
	worker_shmem_request();
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = worker_shmem_startup;
}

/* The slot of dboid, or a free one for InvalidOid; the mutex is held */
static WorkerSlot *
find_slot(Oid dboid)
{
	int			i;

	for (i = 0; i < state->nslots; i++)
		if (state->slots[i].dboid == dboid)
			return &state->slots[i];
	return NULL;
}

/* Wake the launcher, if one runs */
static void
wake_launcher(void)
{
	Latch	   *latch;

	SpinLockAcquire(&state->mutex);
	latch = state->launcher_latch;
	SpinLockRelease(&state->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * Ask for work in a database: its worker is started if none runs, and does
 * the work before it exits; a worker that runs is woken to take it.  False
 * when the server was not started with redislock preloaded, or when the
 * table has no room left; the launcher then asks again for its recoveries
 * once a slot is free.
 */
bool
redislock_request_worker(Oid dboid, uint32 work)
{
	WorkerSlot *slot;
	Latch	   *worker_latch = NULL;

	if (state == NULL)
		return false;

	SpinLockAcquire(&state->mutex);
	slot = find_slot(dboid);
	if (slot == NULL && (slot = find_slot(InvalidOid)) != NULL)
	{
		slot->dboid = dboid;
		slot->attempts = 0;
		slot->not_before = 0;
	}
	if (slot != NULL)
	{
		slot->work |= work;
		worker_latch = slot->latch;
	}
	SpinLockRelease(&state->mutex);

	if (worker_latch != NULL)
		SetLatch(worker_latch);
	else if (slot != NULL)
		wake_launcher();
	return slot != NULL;
}

/*
 * Will this database's worker look at the leases by due, without being
 * asked?  It will when it renews (asked for renewal, and still doing it)
 * and has said that it looks again by then.  Read without the mutex: the
 * caller has published its lock before (a full barrier is between), and
 * the worker says it looks (renew_wake_at 0) before it copies the lock
 * table, and stops renewing only after a last look with the bit cleared.
 * Whichever of the two comes first, the lock is seen.
 */
static bool
renewal_on_time(Oid dboid, TimestampTz due)
{
	int			i;

	pg_memory_barrier();
	for (i = 0; i < state->nslots; i++)
	{
		WorkerSlot *slot = &state->slots[i];
		uint64		wake_at;

		if (slot->dboid != dboid ||
			((slot->work | slot->taken) & REDISLOCK_WORK_RENEW) == 0)
			continue;
		wake_at = pg_atomic_read_u64(&slot->renew_wake_at);
		return wake_at != 0 && (TimestampTz) wake_at <= due;
	}
	return false;
}

/*
 * A lock was granted, in this database, whose lease the watchdog renews
 * first at due: ask for renewal unless the worker renews already and looks
 * by then.  Most acquires so write nothing to shared memory here.
 */
void
redislock_request_renewal(TimestampTz due)
{
	if (state == NULL || renewal_on_time(MyDatabaseId, due))
		return;
	(void) redislock_request_worker(MyDatabaseId, REDISLOCK_WORK_RENEW);
}

/* The pid of the worker that runs in a database, 0 when none does */
int
redislock_worker_pid(Oid dboid)
{
	WorkerSlot *slot;
	int			pid = 0;

	if (state == NULL)
		return 0;
	SpinLockAcquire(&state->mutex);
	slot = find_slot(dboid);
	if (slot != NULL)
		pid = slot->pid;
	SpinLockRelease(&state->mutex);
	return pid;
}

/*
 * The pause before the next start of a database's worker, which has
 * already been started that many times without success
 */
static int
retry_pause_ms(int attempts)
{
	return Min(FIRST_RETRY_MS << Min(attempts, 16), LAST_RETRY_MS);
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

/*
 * Ask for recovery in each database of the list; returns those for which
 * the table had no room, to ask again later
 */
static List *
request_recoveries(List *dboids)
{
	List	   *left = NIL;
	ListCell   *lc;

	foreach(lc, dboids)
		if (!redislock_request_worker(lfirst_oid(lc), REDISLOCK_WORK_RECOVER))
			left = lappend_oid(left, lfirst_oid(lc));
	list_free(dboids);
	return left;
}

/* Forget the starts whose worker has stopped, or never started */
static void
forget_stopped_launches(void)
{
	int			i;

	for (i = 0; i < state->nslots; i++)
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

/*
 * Terminate the workers whose database a command needs to itself.  Their
 * work stays asked for: the database may be renamed or copied, not
 * dropped.
 */
static void
terminate_workers_in_the_way(void)
{
	int			i;

	for (i = 0; i < state->nslots; i++)
	{
		Oid			dboid;
		pid_t		pid;

		SpinLockAcquire(&state->mutex);
		dboid = state->slots[i].dboid;
		pid = state->slots[i].pid;
		SpinLockRelease(&state->mutex);

		if (pid != 0 && database_claimed(dboid))
		{
			ereport(DEBUG1,
					(errmsg_internal("terminating redislock worker %d of database %u for a command that needs the database",
									 (int) pid, dboid)));
			(void) kill(pid, SIGTERM);
		}
	}
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
	worker.bgw_notify_pid = MyProcPid;
	if (!RegisterDynamicBackgroundWorker(&worker, &launches[i]))
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start a redislock worker for database %u: out of background worker slots",
						dboid),
				 errhint("You might need to increase max_worker_processes.")));
}

/*
 * Start the worker of slot i, whose work is due, unless its database is
 * gone or taken by a command.  The next start, if this one fails, waits
 * longer: returns when it may be, DT_NOEND when the slot was freed.
 */
static TimestampTz
start_due_worker(int i, Oid dboid, List *dbs, TimestampTz now)
{
	WorkerSlot *slot = &state->slots[i];
	TimestampTz not_before;

	if (!list_member_oid(dbs, dboid))
	{
		ereport(DEBUG1,
				(errmsg_internal("redislock forgets database %u, which no longer takes connections",
								 dboid)));
		SpinLockAcquire(&state->mutex);
		if (slot->dboid == dboid && slot->pid == 0)
			slot->dboid = InvalidOid;
		SpinLockRelease(&state->mutex);
		return DT_NOEND;
	}

	SpinLockAcquire(&state->mutex);
	not_before = TimestampTzPlusMilliseconds(now,
											 retry_pause_ms(slot->attempts));
	slot->not_before = not_before;
	slot->attempts++;
	SpinLockRelease(&state->mutex);

	if (!database_claimed(dboid))
		start_worker(i, dboid);
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
	Oid		   *due = palloc0(sizeof(Oid) * state->nslots);
	bool		any_due = false;
	bool		any_running = false;
	int			i;

	forget_stopped_launches();
	SpinLockAcquire(&state->mutex);
	for (i = 0; i < state->nslots; i++)
	{
		WorkerSlot *slot = &state->slots[i];

		if (slot->pid != 0 || launches[i] != NULL)
			any_running = true;
		else if (OidIsValid(slot->dboid) && slot->work != 0)
		{
			if (slot->not_before <= now)
			{
				due[i] = slot->dboid;
				any_due = true;
			}
			else
				next = Min(next, slot->not_before);
		}
	}
	SpinLockRelease(&state->mutex);

	if (any_due)
	{
		List	   *dbs = connectable_databases();

		for (i = 0; i < state->nslots; i++)
		{
			TimestampTz not_before;

			if (!OidIsValid(due[i]))
				continue;
			not_before = start_due_worker(i, due[i], dbs, now);
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

/*
 * When the next recovery in every database is due: a crash is not the only
 * way records are left (a give-back that could not reach Redis), and the
 * rows of decrements whose records are gone pile up until a recovery
 * deletes them.
 */
static TimestampTz
sweep_after(TimestampTz now)
{
	if (recover_interval_ms == 0)
		return DT_NOEND;
	return TimestampTzPlusMilliseconds(now, recover_interval_ms);
}

/* The launcher's sleep: until a worker is due (-1: none) or the sweep is */
static long
until_sweep(long timeout, TimestampTz next_sweep)
{
	long		sweep_ms;

	if (next_sweep == DT_NOEND)
		return timeout;
	sweep_ms = Max(TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
												   next_sweep), 1);
	return timeout < 0 ? sweep_ms : Min(timeout, sweep_ms);
}

/* At the launcher's exit: requests no longer wake it */
static void
forget_launcher(int code, Datum arg)
{
	SpinLockAcquire(&state->mutex);
	state->launcher_latch = NULL;
	SpinLockRelease(&state->mutex);
}

/*
 * The launcher.  It asks for a recovery in every database, then starts
 * workers as they are asked for and due, and watches those that run.  It
 * sleeps on its latch, which requests, its workers' starts and exits (the
 * postmaster signals it), SIGHUP and SIGTERM set.
 */
void
redislock_launcher_main(Datum main_arg)
{
	List	   *backlog;
	TimestampTz next_sweep;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	launches = MemoryContextAllocZero(TopMemoryContext,
									  sizeof(BackgroundWorkerHandle *) * state->nslots);
	SpinLockAcquire(&state->mutex);
	state->launcher_latch = MyLatch;
	SpinLockRelease(&state->mutex);
	on_shmem_exit(forget_launcher, 0);

	backlog = connectable_databases();
	next_sweep = sweep_after(GetCurrentTimestamp());
	for (;;)
	{
		long		timeout;
		TimestampTz now = GetCurrentTimestamp();

		if (now >= next_sweep)
		{
			List	   *dbs = connectable_databases();

			backlog = list_concat_unique_oid(backlog, dbs);
			list_free(dbs);
			next_sweep = sweep_after(now);
		}
		backlog = request_recoveries(backlog);
		terminate_workers_in_the_way();
		timeout = until_sweep(start_due_workers(), next_sweep);
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_EXIT_ON_PM_DEATH |
						 (timeout >= 0 ? WL_TIMEOUT : 0),
						 timeout, redislock_wait_event);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			next_sweep = sweep_after(GetCurrentTimestamp());
		}
	}
}

/*
 * Take the slot of dboid as its worker; false when there is none, or when
 * another worker has it (one a previous launcher started)
 */
static bool
attach_slot(Oid dboid)
{
	SpinLockAcquire(&state->mutex);
	my_slot = find_slot(dboid);
	if (my_slot != NULL && my_slot->pid == 0)
	{
		my_slot->pid = MyProcPid;
		my_slot->latch = MyLatch;
	}
	else
		my_slot = NULL;
	SpinLockRelease(&state->mutex);
	return my_slot != NULL;
}

/*
 * At a worker's exit, however it exits (done, failed or terminated): leave
 * the slot, with the work it took and did not finish asked for again, and
 * free the slot when no work is left.  The launcher starts a worker again
 * only for work not done.
 */
static void
detach_slot(int code, Datum arg)
{
	SpinLockAcquire(&state->mutex);
	my_slot->work |= my_slot->taken;
	my_slot->taken = 0;
	my_slot->pid = 0;
	my_slot->latch = NULL;
	pg_atomic_write_u64(&my_slot->renew_wake_at, 0);
	if (my_slot->work == 0)
		my_slot->dboid = InvalidOid;
	SpinLockRelease(&state->mutex);
	wake_launcher();
}

/*
 * Take the work asked for in this database: a request made while it is
 * done asks for it once more
 */
static uint32
take_work(void)
{
	uint32		work;

	SpinLockAcquire(&state->mutex);
	work = my_slot->work;
	my_slot->taken |= work;
	my_slot->work = 0;
	SpinLockRelease(&state->mutex);
	return work;
}

/* Work is done: the next request starts a worker without a pause */
static void
work_done(uint32 work)
{
	SpinLockAcquire(&state->mutex);
	my_slot->taken &= ~work;
	my_slot->attempts = 0;
	my_slot->not_before = 0;
	SpinLockRelease(&state->mutex);
}

/*
 * The schema of the extension and the names of its servers, in the
 * current memory context; false when the extension is not installed
 */
static bool
extension_servers(char **nspname, List **servers)
{
	MemoryContext cxt = CurrentMemoryContext;
	uint64		i;

	*nspname = NULL;
	*servers = NIL;
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_execute(SERVERS_QUERY, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list the Redis servers of database \"%s\"",
			 my_dbname);
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	row = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *srvname = SPI_getvalue(row, desc, 2);
		MemoryContext oldcxt = MemoryContextSwitchTo(cxt);

		*nspname = pstrdup(SPI_getvalue(row, desc, 1));
		if (srvname != NULL)
			*servers = lappend(*servers, pstrdup(srvname));
		MemoryContextSwitchTo(oldcxt);
	}
	PopActiveSnapshot();
	SPI_finish();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	return *nspname != NULL;
}

/*
 * Can the server hold stock?  A server whose calls are decided by a quorum
 * (Redlock) cannot, as its masters are independent counters, and
 * recovering there is an error that trying again would only repeat.
 */
static bool
server_holds_stock(const char *srvname)
{
	ForeignServer *server = GetForeignServerByName(srvname, false);
	RedisServerOptions opts;

	redis_read_options(&opts, server->options, NIL);
	return redis_topology_of_kind(opts.kind)->decide == NULL;
}

/* The int8 in column col of the only row that SPI returned */
static int64
result_int8(int col)
{
	bool		isnull;
	Datum		value = SPI_getbinval(SPI_tuptable->vals[0],
									  SPI_tuptable->tupdesc, col, &isnull);

	return isnull ? 0 : DatumGetInt64(value);
}

/*
 * Run redis_stock_recover() on a server, in the current transaction, and
 * summarize what it did.  The items are copied into cxt.
 */
static void
recover_on(const char *nspname, const char *srvname, RecoverySummary *sum,
		   MemoryContext cxt)
{
	char	   *items;

	(void) set_config_option("redislock.server", srvname, PGC_SUSET,
							 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_execute(psprintf(RECOVER_QUERY, quote_identifier(nspname)),
					false, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "redis_stock_recover() returned no summary");
	sum->given = result_int8(1);
	sum->units = result_int8(2);
	items = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
	sum->items = items != NULL ? MemoryContextStrdup(cxt, items) : NULL;
	sum->failed = result_int8(4);
	sum->undecided = result_int8(5);
	PopActiveSnapshot();
	SPI_finish();
}

/* Say what a recovery gave back, and what it left */
static void
report_recovery(const char *srvname, const RecoverySummary *sum)
{
	if (sum->given > 0)
		ereport(LOG,
				(errmsg_plural("gave back %lld unit of Redis stock on server \"%s\" in database \"%s\"",
							   "gave back %lld units of Redis stock on server \"%s\" in database \"%s\"",
							   sum->units, (long long) sum->units, srvname,
							   my_dbname),
				 errdetail_plural("%lld decrement did not commit.  Units by item: %s.",
								  "%lld decrements did not commit.  Units by item: %s.",
								  sum->given, (long long) sum->given,
								  sum->items)));
	if (sum->undecided > 0)
		ereport(LOG,
				(errmsg_plural("%lld decrement record of Redis stock on server \"%s\" in database \"%s\" was left undecided",
							   "%lld decrement records of Redis stock on server \"%s\" in database \"%s\" were left undecided",
							   sum->undecided, (long long) sum->undecided,
							   srvname, my_dbname),
				 errhint("redis_stock_recover() shows each record with its outcome.")));
}

/*
 * What a worker has to do: renew leases while locks here want it, and
 * recover stock when asked, again after a pause when that failed
 */
typedef struct WorkerPlan
{
	bool		renewing;		/* renewal taken, and not given up */
	TimestampTz renew_at;		/* the next look at the leases */
	TimestampTz idle_since;		/* no lease to renew since, 0 while some */
	bool		waking;			/* listening for waiters taken, and not
								 * given up */
	TimestampTz wake_idle_since;	/* no waiter to listen for since, 0
									 * while some */
	TimestampTz recover_at;		/* the next recovery, DT_NOEND for none */
	int			recover_failures;	/* since the last that succeeded */
} WorkerPlan;

static void renew_as_planned(WorkerPlan *plan);

/*
 * The least that a step of stock recovery may wait on Redis while leases
 * are renewed, in ms
 */
#define RECOVER_MIN_WAIT_MS	50

/*
 * Cap the current transaction's Redis timeouts at the time left until
 * renew_at, the next look at the leases: recovering on a server that
 * cannot be reached then waits no longer than a renewal may, so that the
 * renewals on other servers are not delayed by it.
 */
static void
cap_redis_waits(TimestampTz renew_at)
{
	long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
													 renew_at);
	char		value[32];

	ms = Max(ms, RECOVER_MIN_WAIT_MS);
	snprintf(value, sizeof(value), "%ld", ms);
	if (ms < redislock_connect_timeout)
		(void) set_config_option("redislock.connect_timeout", value,
								 PGC_SUSET, PGC_S_SESSION, GUC_ACTION_LOCAL,
								 true, 0, false);
	if (ms < redislock_command_timeout)
		(void) set_config_option("redislock.command_timeout", value,
								 PGC_SUSET, PGC_S_SESSION, GUC_ACTION_LOCAL,
								 true, 0, false);
}

/*
 * Recover the stock of one server, in a transaction of its own, so that
 * an error (Redis unreachable, the server dropped meanwhile) ends only
 * that transaction and is logged; the other servers go on.  Its waits on
 * Redis end by renew_at, unless that is DT_NOEND.  True when every record
 * that could be settled was.
 */
static bool
recover_server(const char *nspname, const char *srvname, TimestampTz renew_at)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool done = false;

	pgstat_report_activity(STATE_RUNNING,
						   psprintf("recovering Redis stock on server %s",
									quote_identifier(srvname)));
	PG_TRY();
	{
		RecoverySummary sum = {0};

		StartTransactionCommand();
		if (renew_at != DT_NOEND)
			cap_redis_waits(renew_at);
		if (server_holds_stock(srvname))
			recover_on(nspname, srvname, &sum, cxt);
		else
			ereport(DEBUG1,
					(errmsg_internal("redislock server \"%s\" in database \"%s\" holds no stock",
									 srvname, my_dbname)));
		CommitTransactionCommand();
		report_recovery(srvname, &sum);
		done = sum.failed == 0;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		ereport(LOG,
				(errcode(edata->sqlerrcode),
				 errmsg("could not recover Redis stock on server \"%s\" in database \"%s\"",
						srvname, my_dbname),
				 errdetail_internal("%s", edata->message),
				 errhint("The redislock worker tries again later.")));
		FreeErrorData(edata);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	pgstat_report_activity(STATE_IDLE, NULL);
	return done;
}

/*
 * Recover the stock of every server of this database, renewing the leases
 * that fall due between servers when the plan renews.  True when each one
 * succeeded, or when the extension is not installed here.
 */
static bool
recover_database(WorkerPlan *plan)
{
	char	   *nspname;
	List	   *servers;
	ListCell   *lc;
	bool		done = true;

	if (!extension_servers(&nspname, &servers))
	{
		ereport(DEBUG1,
				(errmsg_internal("extension redislock is not installed in database \"%s\"",
								 my_dbname)));
		return true;
	}
	foreach(lc, servers)
	{
		CHECK_FOR_INTERRUPTS();
		if (plan->renewing)
			renew_as_planned(plan);
		if (!recover_server(nspname, lfirst(lc),
							plan->renewing ? plan->renew_at : DT_NOEND))
			done = false;
	}
	return done;
}

/*
 * Set up the worker's session: its database's name, for messages, and a
 * search_path of pg_catalog alone.  The worker runs as a superuser, and
 * no function or operator that a user made may stand in for a built-in one
 * in its queries.
 */
static void
init_session(void)
{
	StartTransactionCommand();
	my_dbname = MemoryContextStrdup(TopMemoryContext,
									get_database_name(MyDatabaseId));
	SetConfigOption("search_path", "pg_catalog", PGC_SUSET, PGC_S_SESSION);
	CommitTransactionCommand();
}

/*
 * For a database's worker: the connection of serverid and userid, or NULL
 * (logged) when it cannot be had: the server was dropped, or its options
 * are no longer valid.  In a subtransaction of the current transaction, so
 * that the failure of one server leaves the others alone.
 */
RedisConn *
redislock_worker_conn(Oid serverid, Oid userid)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	RedisConn  *volatile conn = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		conn = redis_conn_for_user(serverid, userid);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		ereport(LOG,
				(errcode(edata->sqlerrcode),
				 errmsg("could not connect to foreign server %u in the redislock worker",
						serverid),
				 errdetail_internal("%s", edata->message)));
		FreeErrorData(edata);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return conn;
}

/* Add to the plan the work asked for since the worker last looked */
static void
plan_taken_work(WorkerPlan *plan)
{
	uint32		work = take_work();

	if (work & REDISLOCK_WORK_RECOVER)
		plan->recover_at = 0;
	if (work & REDISLOCK_WORK_RENEW)
	{
		plan->renewing = true;
		plan->renew_at = 0;
	}
	if (work & REDISLOCK_WORK_WAKE)
		plan->waking = true;
}

/*
 * Recover stock, the plan says it is due.  When it fails, a worker that
 * renews leases tries again itself after a pause, since its leaving would
 * stop the renewals; false for a worker that does not, which leaves for
 * the launcher to start it again later.
 */
static bool
recover_as_planned(WorkerPlan *plan)
{
	if (recover_database(plan))
	{
		work_done(REDISLOCK_WORK_RECOVER);
		plan->recover_at = DT_NOEND;
		plan->recover_failures = 0;
		return true;
	}
	plan->recover_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   retry_pause_ms(plan->recover_failures++));
	return plan->renewing || plan->waking;
}

/*
 * Stop renewing, no lease having wanted it for a while: renewal is done,
 * and a last look, with the request cleared, finds any lock granted before
 * (a lock granted later asks again).  False when that look found some.
 */
static bool
stop_renewing(WorkerPlan *plan)
{
	work_done(REDISLOCK_WORK_RENEW);
	if (watchdog_renew_due_leases() == DT_NOEND)
		return true;
	SpinLockAcquire(&state->mutex);
	my_slot->taken |= REDISLOCK_WORK_RENEW;
	SpinLockRelease(&state->mutex);
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

	pg_atomic_write_u64(&my_slot->renew_wake_at, 0);
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
		return;
	}
	plan->renew_at = Min(next, TimestampTzPlusMilliseconds(now,
														   RENEW_MAX_SLEEP_MS));
	pg_atomic_write_u64(&my_slot->renew_wake_at, (uint64) plan->renew_at);
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
		work_done(REDISLOCK_WORK_WAKE);
		if (waker_serve() == 0)
		{
			plan->waking = false;
			return;
		}
		SpinLockAcquire(&state->mutex);
		my_slot->taken |= REDISLOCK_WORK_WAKE;
		SpinLockRelease(&state->mutex);
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
	TimestampTz wake = Min(plan->renew_at, plan->recover_at);
	long		timeout_ms;
	WaitEventSet *set;
	WaitEvent	event;

	if (plan->waking)
		wake = Min(wake, TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													 WAKE_MAX_SLEEP_MS));
	timeout_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), wake);
	set = CreateWaitEventSet(CurrentMemoryContext,
							 2 + (plan->waking ? waker_nsockets() : 0));
	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	if (plan->waking)
		waker_add_sockets(set);
	(void) WaitEventSetWait(set, Max(timeout_ms, 1), &event, 1,
							redislock_wait_event);
	FreeWaitEventSet(set);
	ResetLatch(MyLatch);
}

/*
 * A database's worker: it does the work asked for there, and exits when
 * none is left, or when a recovery failed and no lease needs it, for the
 * launcher to start it again later.
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

	if (!attach_slot(dboid))
		proc_exit(0);
	on_shmem_exit(detach_slot, 0);
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	init_session();

	plan.recover_at = DT_NOEND;
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
		if (!plan.renewing && !plan.waking && plan.recover_at == DT_NOEND)
			break;
		if (plan.recover_at <= GetCurrentTimestamp() &&
			!recover_as_planned(&plan))
			break;
		if (plan.renewing && plan.renew_at <= GetCurrentTimestamp())
			renew_as_planned(&plan);
		if (plan.waking)
			wake_as_planned(&plan);
		if (!plan.renewing && !plan.waking && plan.recover_at != DT_NOEND)
			break;				/* a failed recovery, and renewal over */
		if (plan.renewing || plan.waking)
			sleep_as_planned(&plan);
	}
	proc_exit(0);
}
