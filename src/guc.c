/*-------------------------------------------------------------------------
 *
 * guc.c
 *		Every redislock.* setting, and whether the library was preloaded,
 *		which decides the settings that exist.
 *
 * Every file reads the settings here; none defines one.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "utils/guc.h"

#include "compat.h"
#include "guc.h"

char	   *redislock_server_name = NULL;
int			redislock_connect_timeout = 1000;
int			redislock_command_timeout = 1000;
int			redislock_end_timeout_limit = 30000;
bool		redislock_verify_before_commit = true;
bool		redislock_lease_renewal = true;
int			redislock_lease_renewal_limit = 600000;
int			redislock_purge_delay = 60000;
int			redislock_max_locks = 4096;
int			redislock_max_workers = 4;
int			redislock_recover_interval = 300000;
bool		redislock_preloaded = false;

/*
 * The settings of a preloaded library: the sizes of its shared memory,
 * which only a restart changes, and the background workers' interval.
 */
static void
define_preload_settings(void)
{
	DefineCustomIntVariable("redislock.max_locks",
							"Number of Redis locks that all backends together can hold or wait for.",
							"Each lock held or awaited takes an entry of the shared lock table.",
							&redislock_max_locks,
							4096, 1, INT_MAX / 2,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("redislock.max_workers",
							"Number of databases whose locks the background workers serve at once.",
							"Each database whose locks are renewed or woken takes a worker; redislock takes at most this many of max_worker_processes, besides its launcher and one recovery worker.",
							&redislock_max_workers,
							4, 1, MAX_BACKENDS,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("redislock.recover_interval",
							"Time between two stock recoveries by the background worker.",
							"Besides the recovery at server start and after a crash, the worker recovers stock in every database this often, which also deletes the rows of decrements whose records are gone; 0 recovers only at start.",
							&redislock_recover_interval,
							300000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/*
 * Settings are user-settable, as each one only affects the session's own
 * work, except the administrator's caps on transaction ends and on lease
 * renewal.
 */
static void
define_session_settings(void)
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

	/*
	 * The lease watchdog of a preloaded library renews the leases of a
	 * session's locks unless the session says otherwise; how long it goes on
	 * for a holder that never ends is the administrator's call.
	 */
	DefineCustomBoolVariable("redislock.lease_renewal",
							 "Has the background worker renew the leases of the Redis locks this session takes.",
							 "Renewal keeps a lock held for longer than its ttl_ms while its holder lives; it needs redislock in shared_preload_libraries.",
							 &redislock_lease_renewal,
							 true,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("redislock.lease_renewal_limit",
							"Time after which the leases of a Redis lock are no longer renewed.",
							"Counted from the lock's grant; 0 renews for as long as the lock is held.",
							&redislock_lease_renewal_limit,
							600000, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	/*
	 * A Redis that loses acknowledged writes (a crash under appendfsync
	 * everysec, a failover to a replica that lagged) may bring back a
	 * record whose clear it had acknowledged: its row must outlive that.
	 */
	DefineCustomIntVariable("redislock.purge_delay",
							"Time a decrement's row is kept after its record was first found gone from Redis.",
							"A Redis that loses acknowledged writes may bring back a record whose row is gone; 0 deletes the row at once.",
							&redislock_purge_delay,
							60000, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

}

/*
 * Define the settings: those of the preload first, when preloaded, since
 * reserving the prefix afterwards turns any other redislock.* name into an
 * error.
 */
void
redislock_define_settings(bool preloaded)
{
	redislock_preloaded = preloaded;
	if (preloaded)
		define_preload_settings();
	define_session_settings();
	MarkGUCPrefixReserved("redislock");
}
