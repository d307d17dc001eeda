/*-------------------------------------------------------------------------
 *
 * worker.h
 *		The background workers of a preloaded redislock (worker.c): a
 *		launcher, and a worker per database that it starts on demand.
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

extern void redislock_init_worker(void);
extern void worker_shmem_request(void);
extern void worker_shmem_startup(void);
extern bool redislock_request_worker(Oid dboid, uint32 work);
extern void redislock_request_renewal(TimestampTz due);
extern int	redislock_worker_pid(Oid dboid);

/* The recovery worker's place in the launcher's table (recoverer.c) */
extern bool redislock_attach_recovery(Oid dboid);
extern void redislock_recovery_succeeded(void);

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
