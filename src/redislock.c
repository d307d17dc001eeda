/*-------------------------------------------------------------------------
 *
 * redislock.c
 *		Module entry point: settings, wait event and the owner token.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "redislock.h"

PG_MODULE_MAGIC;

char	   *redislock_server_name = NULL;
int			redislock_connect_timeout = 1000;
int			redislock_command_timeout = 1000;
int			redislock_end_timeout_limit = 30000;
bool		redislock_verify_before_commit = true;

uint32		redislock_wait_event = PG_WAIT_EXTENSION;

/* Built on first use; lives as long as the backend */
/* What every owner token of this backend starts and ends with */
static char *token_backend = NULL;
static char *token_random = NULL;

void		_PG_init(void);

/*
 * The owner token of this backend's locks on a foreign server: random bytes
 * from pg_strong_random, so nobody can guess it, prefixed by host, port, pid
 * and the server's OID so that someone looking at the key with redis-cli can
 * tell which backend holds it.  One token serves every lock of the backend
 * on one server, as a Redisson client id serves every lock of a client; two
 * servers that lead to the same keys (one Redis, one key prefix) are two
 * owners, so that a release through one never ends a hold taken through
 * the other.  Palloc'd in the current memory context.
 */
char *
redislock_owner_token(Oid serverid)
{
	if (token_random == NULL)
	{
		uint8		random_bytes[16];
		char		hex[sizeof(random_bytes) * 2 + 1];
		char		hostname[256];
		int			i;

		if (!pg_strong_random(random_bytes, sizeof(random_bytes)))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate a random Redis lock owner token")));
		for (i = 0; i < (int) sizeof(random_bytes); i++)
			snprintf(hex + i * 2, 3, "%02x", random_bytes[i]);

		if (gethostname(hostname, sizeof(hostname)) != 0)
			strlcpy(hostname, "unknown", sizeof(hostname));
		hostname[sizeof(hostname) - 1] = '\0';

		token_backend = MemoryContextStrdup(TopMemoryContext,
											psprintf("pg:%s:%d:%d", hostname,
													 PostPortNumber,
													 MyProcPid));
		token_random = MemoryContextStrdup(TopMemoryContext, hex);
	}
	return psprintf("%s:%u:%s", token_backend, serverid, token_random);
}

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
}
