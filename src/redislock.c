/*-------------------------------------------------------------------------
 *
 * redislock.c
 *		Module entry point: settings, callbacks and the one chain of
 *		shared-memory hooks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "storage/ipc.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "guc.h"
#include "io/io.h"
#include "lock/lock.h"
#include "server/server.h"
#include "stats.h"
#include "worker/worker.h"
#include "xact.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * Ask for the shared memory of the lock table, the counters, the address
 * book and the workers' table
 */
static void
request_shmem(void)
{
	worker_shmem_request();
	locktable_shmem_request();
	stats_shmem_request();
	addressbook_shmem_request();
}

static void
startup_shmem(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	worker_shmem_startup();
	locktable_shmem_startup();
	stats_shmem_startup();
	addressbook_shmem_startup();
}

/*
 * A preloaded library sizes its shared memory now, from settings that only
 * a restart changes.
 */
static void
init_shared_memory(void)
{
	compat_request_shmem(request_shmem);
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = startup_shmem;
}

void
_PG_init(void)
{
	redislock_define_settings(process_shared_preload_libraries_in_progress);
	if (redislock_preloaded)
	{
		init_shared_memory();
		redislock_init_worker();
	}
	redislock_init_connections();
	redislock_init_xact();
}
