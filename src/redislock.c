/*-------------------------------------------------------------------------
 *
 * redislock.c
 *		Module entry point: settings and wait event.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "redislock.h"
#include "worker.h"

PG_MODULE_MAGIC;

char	   *redislock_server_name = NULL;
int			redislock_connect_timeout = 1000;
int			redislock_command_timeout = 1000;
int			redislock_end_timeout_limit = 30000;
bool		redislock_verify_before_commit = true;

uint32		redislock_wait_event = PG_WAIT_EXTENSION;

void		_PG_init(void);

/*
 * Settings are user-settable, as each one only affects the session's own
 * work, except the administrator's cap on transaction ends.
 */
static void
define_settings(void)
{
	DefineCustomStringVariable("redislock.server",
							   "Foreign server that names the Redis server to use.",
							   "The server must be of the foreign data wrapper redislock.",
							   &redislock_server_name,
							   "redislock",
							   PGC_USERSET, 0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("redislock.connect_timeout",
							"Time allowed to connect and authenticate to Redis.",
							NULL,
							&redislock_connect_timeout,
							1000, 1, 3600 * 1000,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("redislock.command_timeout",
							"Time allowed for one Redis operation, from the first byte sent to the last reply.",
							NULL,
							&redislock_command_timeout,
							1000, 1, 3600 * 1000,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	/*
	 * Commit and abort hold PostgreSQL's locks while they release Redis
	 * state, so the administrator caps how long that may take, whatever
	 * command_timeout a user sets.
	 */
	DefineCustomIntVariable("redislock.end_timeout_limit",
							"Longest time the Redis work of one transaction end may take.",
							"It caps redislock.command_timeout at commit, abort and backend exit.",
							&redislock_end_timeout_limit,
							30000, 1, 3600 * 1000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("redislock.verify_before_commit",
							 "Confirms before commit that every transaction-scoped Redis lock is still held.",
							 "The check also renews the leases so that they cover the commit.",
							 &redislock_verify_before_commit,
							 true,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);

	MarkGUCPrefixReserved("redislock");
}

void
_PG_init(void)
{
	define_settings();
#if PG_VERSION_NUM >= 170000
	redislock_wait_event = WaitEventExtensionNew("RedisLock");
#endif
	redislock_init_connections();
	redislock_init_xact();
	if (process_shared_preload_libraries_in_progress)
		redislock_init_worker();
}
