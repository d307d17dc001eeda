/*-------------------------------------------------------------------------
 *
 * recoverer.c
 *		The recovery worker of a preloaded redislock: it settles, in one
 *		database, the decrements of Redis stock that transactions left
 *		open, as redis_stock_recover() settles them, and exits.
 *
 * The launcher (launcher.c) starts one recovery worker at a time for the
 * whole server, one database after another: at start, after a crash,
 * after a promotion, and every redislock.recover_interval; never on a
 * standby.  Recovery may be long (it SCANs every key of a server) and may
 * wait for locks (an open redis_stock_recover() holds the decisions
 * table), so it runs in a process of its own, never in the worker that
 * renews leases and wakes waiters: nothing it waits for delays a renewal.
 * Its lock waits end after RECOVER_LOCK_TIMEOUT, so that a database whose
 * recovery is blocked does not hold up the others; like any recovery that
 * failed, it is tried again later, after a pause of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "foreign/foreign.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "server/server.h"
#include "worker/worker.h"

/*
 * The longest that a recovery waits for a lock, on the decisions table or
 * a catalog, before it fails and is tried again later
 */
#define RECOVER_LOCK_TIMEOUT	"5s"

/* The database's name, for messages */
static char *my_dbname = NULL;

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
 * its outcomes are documented; "in progress" belongs to a live transaction,
 * "other database" to the recovery of another database, which decides it
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
	"          ('aborted', 'committed', 'in progress', 'other database', " \
	"           'give-back failed', 'clear failed'))"

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
 * Recover the stock of one server, in a transaction of its own, so that
 * an error (Redis unreachable, the server dropped meanwhile, a lock wait
 * that timed out) ends only that transaction and is logged; the other
 * servers go on.  True when every record that could be settled was.
 */
static bool
recover_server(const char *nspname, const char *srvname)
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
 * Recover the stock of every server of this database.  True when each one
 * succeeded, or when the extension is not installed here.
 */
static bool
recover_database(void)
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
		if (!recover_server(nspname, lfirst(lc)))
			done = false;
	}
	return done;
}

/*
 * Set up the worker's session: its database's name, for messages, and a
 * search_path of pg_catalog alone.  The worker runs as a superuser, and
 * no function or operator that a user made may stand in for a built-in one
 * in its queries.  Its lock waits end, as one recovery runs at a time.
 */
static void
init_session(void)
{
	StartTransactionCommand();
	my_dbname = MemoryContextStrdup(TopMemoryContext,
									get_database_name(MyDatabaseId));
	SetConfigOption("search_path", "pg_catalog", PGC_SUSET, PGC_S_SESSION);
	SetConfigOption("lock_timeout", RECOVER_LOCK_TIMEOUT, PGC_SUSET,
					PGC_S_SESSION);
	CommitTransactionCommand();
}

/*
 * A recovery worker: recover the stock of the database of main_arg, say
 * whether that succeeded, and exit.
 */
void
redislock_recovery_main(Datum main_arg)
{
	Oid			dboid = DatumGetObjectId(main_arg);

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	if (!redislock_attach_recovery(dboid))
		proc_exit(0);
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	init_session();
	if (recover_database())
		redislock_recovery_succeeded();
	proc_exit(0);
}
