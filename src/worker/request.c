/*-------------------------------------------------------------------------
 *
 * request.c
 *		The table of the background workers in shared memory, where any
 *		process asks for work in a database, and where the workers find it.
 *
 * Foreign servers and user mappings live in each database's catalog, so
 * work on Redis is done by a worker connected to the database whose
 * servers it concerns (dbworker.c).  The launcher (launcher.c), connected
 * to no database, starts those workers.  A small table in shared memory
 * holds, per database whose locks want a worker, the work asked for, the
 * worker attached, and when the next start may be.  Any process may ask
 * for work there (redislock_request_worker()), and setting the launcher's
 * latch wakes it to start the worker.  The table has redislock.max_workers
 * slots, and the launcher starts no other worker than theirs, one recovery
 * worker and itself: that is all redislock takes of max_worker_processes.
 * A request that finds no slot fails, and a lock whose renewal it asked
 * for says so with a WARNING rather than go unrenewed unseen.  The table
 * also holds the recovery that the launcher started last (recoverer.c),
 * and whether it succeeded.
 *
 * A backend asks for work as it asks autovacuum for some with
 * AutoVacuumRequestWork(): it writes the request here and sets a latch,
 * and never calls the code that does the work.  This file is the bottom
 * of the worker folder: backends (lock/) and every worker call it, and it
 * calls none of them.  Only it touches the table; the launcher and the
 * database workers read and change it through the functions below.
 *
 * After a crash the postmaster makes shared memory anew: nothing from
 * before is kept, and the launcher, restarted, begins again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "guc.h"
#include "worker/worker.h"

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
	int			attempts;		/* starts since the work was last done */
	TimestampTz not_before;		/* no start before this */
} WorkerSlot;

typedef struct WorkerState
{
	slock_t		mutex;
	Latch	   *launcher_latch; /* NULL while no launcher runs */
	Oid			recovering;		/* the database of the last recovery
								 * started */
	pid_t		recovery_pid;	/* its worker, 0 when none runs */
	bool		recovered;		/* it recovered every server there */
	int			nslots;
	WorkerSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} WorkerState;

static WorkerState *state = NULL;

/* A worker's slot */
static WorkerSlot *my_slot = NULL;

static Size
worker_state_size(void)
{
	return add_size(offsetof(WorkerState, slots),
					mul_size(redislock_max_workers, sizeof(WorkerSlot)));
}

/* Ask for the workers' table (see redislock.c's hook) */
void
worker_shmem_request(void)
{
	RequestAddinShmemSpace(worker_state_size());
}

/*
 * Make the table, empty: a slot per database with work or a worker, as
 * many as redislock.max_workers.  At a restart after a crash the
 * postmaster makes all shared memory anew and comes here again, so that
 * nothing from before the crash survives.
 */
void
worker_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	state = ShmemInitStruct("redislock worker", worker_state_size(), &found);
	if (!found)
	{
		int			i;

		memset(state, 0, worker_state_size());
		SpinLockInit(&state->mutex);
		state->nslots = redislock_max_workers;
		for (i = 0; i < state->nslots; i++)
			pg_atomic_init_u64(&state->slots[i].renew_wake_at, 0);
	}
	LWLockRelease(AddinShmemInitLock);
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
 * when the server was not started with redislock preloaded, or when every
 * slot of the table serves another database.
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
 * by then.  Most acquires so write nothing to shared memory here.  When
 * every slot serves another database, the lease runs out unless a later
 * request finds one: say so now, not when the lock is found lost.
 */
void
redislock_request_renewal(TimestampTz due)
{
	if (state == NULL || renewal_on_time(MyDatabaseId, due))
		return;
	if (!redislock_request_worker(MyDatabaseId, REDISLOCK_WORK_RENEW))
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("no redislock worker is free to renew the lease of this lock"),
				 errdetail("All %d worker slots serve other databases, so the lease ends after its ttl_ms unless a slot frees up before.",
						   state->nslots),
				 errhint("You might need to increase redislock.max_workers.")));
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

/* The number of slots, which the launcher counts its starts by */
int
worker_nslots(void)
{
	return state->nslots;
}

/* At the launcher's exit: requests no longer wake it */
static void
forget_launcher(int code, Datum arg)
{
	SpinLockAcquire(&state->mutex);
	state->launcher_latch = NULL;
	SpinLockRelease(&state->mutex);
}

/* The launcher, starting, has requests wake it until it exits */
void
worker_attach_launcher(void)
{
	SpinLockAcquire(&state->mutex);
	state->launcher_latch = MyLatch;
	SpinLockRelease(&state->mutex);
	on_shmem_exit(forget_launcher, 0);
}

/* For the launcher: a copy of slot i */
void
worker_read_slot(int i, WorkerSlotCopy *copy)
{
	WorkerSlot *slot = &state->slots[i];

	SpinLockAcquire(&state->mutex);
	copy->dboid = slot->dboid;
	copy->work = slot->work;
	copy->pid = slot->pid;
	copy->attempts = slot->attempts;
	copy->not_before = slot->not_before;
	SpinLockRelease(&state->mutex);
}

/*
 * For the launcher: free slot i, whose database no longer takes
 * connections, unless it serves another database by now or a worker has
 * attached
 */
void
worker_free_slot(int i, Oid dboid)
{
	WorkerSlot *slot = &state->slots[i];

	SpinLockAcquire(&state->mutex);
	if (slot->dboid == dboid && slot->pid == 0)
		slot->dboid = InvalidOid;
	SpinLockRelease(&state->mutex);
}

/*
 * For the launcher, about to start the worker of slot i: one more start
 * since the work was last done, and no other before not_before
 */
void
worker_postpone_slot(int i, TimestampTz not_before)
{
	WorkerSlot *slot = &state->slots[i];

	SpinLockAcquire(&state->mutex);
	slot->not_before = not_before;
	slot->attempts++;
	SpinLockRelease(&state->mutex);
}

/* For the launcher: a copy of the recovery it started last */
void
worker_read_recovery(RecoveryCopy *copy)
{
	SpinLockAcquire(&state->mutex);
	copy->dboid = state->recovering;
	copy->pid = state->recovery_pid;
	copy->recovered = state->recovered;
	SpinLockRelease(&state->mutex);
}

/* For the launcher: the recovery of dboid is the last started */
void
worker_recovery_starts(Oid dboid)
{
	SpinLockAcquire(&state->mutex);
	state->recovering = dboid;
	state->recovered = false;
	SpinLockRelease(&state->mutex);
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
 * Take the slot of dboid as its worker, until the worker exits; false when
 * there is none, or when another worker has it (one a previous launcher
 * started)
 */
bool
worker_attach_slot(Oid dboid)
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
	if (my_slot != NULL)
		on_shmem_exit(detach_slot, 0);
	return my_slot != NULL;
}

/*
 * Take the work asked for in this database: a request made while it is
 * done asks for it once more
 */
uint32
worker_take_work(void)
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
void
worker_work_done(uint32 work)
{
	SpinLockAcquire(&state->mutex);
	my_slot->taken &= ~work;
	my_slot->attempts = 0;
	my_slot->not_before = 0;
	SpinLockRelease(&state->mutex);
}

/*
 * Work said done is not: a last look found more of it, and the worker
 * takes it again
 */
void
worker_retake_work(uint32 work)
{
	SpinLockAcquire(&state->mutex);
	my_slot->taken |= work;
	SpinLockRelease(&state->mutex);
}

/*
 * The worker, renewing, says when it next looks at the leases, 0 while it
 * looks: what redislock_request_renewal() reads
 */
void
worker_set_renew_wake_at(TimestampTz wake_at)
{
	pg_atomic_write_u64(&my_slot->renew_wake_at, (uint64) wake_at);
}

/* At the recovery worker's exit, however it exits: the next may start */
static void
detach_recovery(int code, Datum arg)
{
	SpinLockAcquire(&state->mutex);
	state->recovery_pid = 0;
	SpinLockRelease(&state->mutex);
	wake_launcher();
}

/*
 * Take the recovery of dboid as its worker (recoverer.c); false when it is
 * not the one the launcher started last, or when another worker has it
 * (one a previous launcher started)
 */
bool
redislock_attach_recovery(Oid dboid)
{
	bool		attached;

	SpinLockAcquire(&state->mutex);
	attached = state->recovering == dboid && state->recovery_pid == 0;
	if (attached)
		state->recovery_pid = MyProcPid;
	SpinLockRelease(&state->mutex);
	if (attached)
		on_shmem_exit(detach_recovery, 0);
	return attached;
}

/* The recovery worker recovered every server of its database */
void
redislock_recovery_succeeded(void)
{
	SpinLockAcquire(&state->mutex);
	state->recovered = true;
	SpinLockRelease(&state->mutex);
}
