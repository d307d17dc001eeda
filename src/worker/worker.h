/*-------------------------------------------------------------------------
 *
 * worker.h
 *		The background workers of a preloaded redislock: a launcher
 *		(launcher.c), and a worker per database that it starts on demand
 *		(dbworker.c), around a table in shared memory (request.c).
 *
 * Any process may ask for a database's worker with
 * redislock_request_worker(), naming the work it wants done there; the
 * launcher starts the worker, which does that work and exits once none is
 * left.  Stock recovery has a worker of its own (recoverer.c), which the
 * launcher starts for one database at a time.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_WORKER_H
#define REDISLOCK_WORKER_H

#include "datatype/timestamp.h"

struct WaitEventSet;

/* Work for a database's worker, as bits of a request */
#define REDISLOCK_WORK_RENEW	0x0002	/* renew the leases of held locks */
#define REDISLOCK_WORK_WAKE		0x0004	/* listen for the releases of locks
										 * that backends wait for */

/* The launcher's registration, from _PG_init (launcher.c) */
extern void redislock_init_worker(void);

/* The workers' table, and the requests made there (request.c) */
extern void worker_shmem_request(void);
extern void worker_shmem_startup(void);
extern bool redislock_request_worker(Oid dboid, uint32 work);
extern void redislock_request_renewal(TimestampTz due);
extern int	redislock_worker_pid(Oid dboid);

/* The recovery worker's place in the table (request.c, for recoverer.c) */
extern bool redislock_attach_recovery(Oid dboid);
extern void redislock_recovery_succeeded(void);

/*
 * For the worker folder's own files.  The table of request.c, as the
 * launcher reads it: a slot, and the recovery it started last.
 */
typedef struct WorkerSlotCopy
{
	Oid			dboid;			/* InvalidOid when the slot is free */
	uint32		work;			/* REDISLOCK_WORK_* asked for */
	pid_t		pid;			/* the worker attached, 0 when none */
	int			attempts;		/* starts since the work was last done */
	TimestampTz not_before;		/* no start before this */
} WorkerSlotCopy;

typedef struct RecoveryCopy
{
	Oid			dboid;			/* the database of the recovery */
	pid_t		pid;			/* its worker, 0 when none runs */
	bool		recovered;		/* it recovered every server there */
} RecoveryCopy;

/* The launcher's use of the table (request.c) */
extern int	worker_nslots(void);
extern void worker_attach_launcher(void);
extern void worker_read_slot(int i, WorkerSlotCopy *copy);
extern void worker_free_slot(int i, Oid dboid);
extern void worker_postpone_slot(int i, TimestampTz not_before);
extern void worker_read_recovery(RecoveryCopy *copy);
extern void worker_recovery_starts(Oid dboid);

/* A database worker's use of its slot (request.c) */
extern bool worker_attach_slot(Oid dboid);
extern uint32 worker_take_work(void);
extern void worker_work_done(uint32 work);
extern void worker_retake_work(uint32 work);
extern void worker_set_renew_wake_at(TimestampTz wake_at);

/* The worker's subscriptions on behalf of its database's waiters (waker.c) */
extern int	waker_serve(void);
extern int	waker_nsockets(void);
extern void waker_add_sockets(struct WaitEventSet *set);

/*
 * The lease watchdog (watchdog.c), run by a database's worker: it renews
 * the leases of the locks granted in its database.
 */
extern TimestampTz watchdog_renew_due_leases(void);

/* Entry points, which the postmaster looks up by name */
extern PGDLLEXPORT void redislock_launcher_main(Datum main_arg);
extern PGDLLEXPORT void redislock_worker_main(Datum main_arg);
extern PGDLLEXPORT void redislock_recovery_main(Datum main_arg);

#endif							/* REDISLOCK_WORKER_H */
