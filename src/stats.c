/*-------------------------------------------------------------------------
 *
 * stats.c
 *		Counters per Redis server, over all backends, when the library is
 *		preloaded, and their SQL functions.
 *
 * A server's counters are atomics in a fixed array in shared memory, found
 * once per connection cache entry (under the array's lock) and then added
 * to without a lock by whichever layer does what they count.  A server is
 * a foreign server of one database, so redis_stats() shows the servers of
 * the current database, as pg_stat_user_tables shows its tables.
 *
 * A server takes a slot at its first use.  When none is free, the slots
 * of dropped servers are taken back: those of the databases that no
 * longer exist, and those of the current database's servers that no
 * longer exist (another database's catalog cannot be read from here: its
 * dropped servers are taken back when it next needs a slot).  A backend
 * that still counts for a server dropped meanwhile finds its slot freed,
 * or given to another, and counts nothing.  When every slot is a live
 * server's, the servers beyond are not counted, and a WARNING says so
 * once, until a slot is free again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_foreign_server.h"
#include "fmgr.h"
#include "foreign/foreign.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "compat.h"
#include "guc.h"
#include "stats.h"

/*
 * Servers counted, over all databases.  The counters of a server beyond
 * that are not kept.
 */
#define MAX_COUNTED_SERVERS 1024

typedef struct RedisServerStats
{
	Oid			dbid;
	Oid			serverid;		/* InvalidOid for a free slot */
	TimestampTz stats_reset;	/* 0 until reset */
	pg_atomic_uint64 counters[REDIS_NUM_STATS];
} RedisServerStats;

typedef struct ServerStatsTable
{
	LWLock	   *lock;			/* for adding a server and resetting */
	int			nservers;		/* slots used so far, free ones included */
	bool		warned_full;	/* a server found no slot, and none freed */
	RedisServerStats servers[MAX_COUNTED_SERVERS];
} ServerStatsTable;

static ServerStatsTable *stats = NULL;

PG_FUNCTION_INFO_V1(redis_stats);
PG_FUNCTION_INFO_V1(redis_stats_reset);

static Size
stats_shmem_size(void)
{
	return sizeof(ServerStatsTable);
}

void
stats_shmem_request(void)
{
	RequestAddinShmemSpace(stats_shmem_size());
	RequestNamedLWLockTranche("redislock stats", 1);
}

/* Attach to the counters, made anew at the first start and after a crash */
void
stats_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	stats = ShmemInitStruct("redislock stats", stats_shmem_size(), &found);
	if (!found)
	{
		stats->lock = &(GetNamedLWLockTranche("redislock stats"))->lock;
		stats->nservers = 0;
		stats->warned_full = false;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* The counters of a server of this database; the caller holds the lock */
static RedisServerStats *
find_server(Oid serverid)
{
	int			i;

	for (i = 0; i < stats->nservers; i++)
		if (stats->servers[i].serverid == serverid &&
			stats->servers[i].dbid == MyDatabaseId)
			return &stats->servers[i];
	return NULL;
}

/*
 * Is the server of this database still there, or being made or dropped by
 * a transaction in progress?  A dirty snapshot sees those: a server made
 * and used in a transaction not yet committed keeps its slot.
 */
static bool
server_exists(Relation rel, Oid serverid)
{
	SnapshotData dirty;
	ScanKeyData key;
	SysScanDesc scan;
	bool		exists;

	InitDirtySnapshot(dirty);
	ScanKeyInit(&key, Anum_pg_foreign_server_oid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(serverid));
	scan = systable_beginscan(rel, ForeignServerOidIndexId, true, &dirty, 1,
							  &key);
	exists = HeapTupleIsValid(systable_getnext(scan));
	systable_endscan(scan);
	return exists;
}

/*
 * Free the slots of dropped servers that this backend can tell of: those
 * of dropped databases, and of this database's dropped servers.  The
 * catalog is read without the lock; a slot is freed only if it still
 * counts the server found dropped.
 */
static void
free_dropped_slots(void)
{
	RedisServerStats *seen = palloc(sizeof(RedisServerStats) * MAX_COUNTED_SERVERS);
	bool	   *dropped = palloc0(sizeof(bool) * MAX_COUNTED_SERVERS);
	Relation	rel;
	int			nseen;
	int			i;

	LWLockAcquire(stats->lock, LW_SHARED);
	nseen = stats->nservers;
	for (i = 0; i < nseen; i++)
	{
		seen[i].dbid = stats->servers[i].dbid;
		seen[i].serverid = stats->servers[i].serverid;
	}
	LWLockRelease(stats->lock);

	rel = table_open(ForeignServerRelationId, AccessShareLock);
	for (i = 0; i < nseen; i++)
	{
		if (!OidIsValid(seen[i].serverid))
			continue;
		if (seen[i].dbid == MyDatabaseId)
			dropped[i] = !server_exists(rel, seen[i].serverid);
		else
			dropped[i] = !SearchSysCacheExists1(DATABASEOID,
												ObjectIdGetDatum(seen[i].dbid));
	}
	table_close(rel, AccessShareLock);

	LWLockAcquire(stats->lock, LW_EXCLUSIVE);
	for (i = 0; i < nseen; i++)
	{
		RedisServerStats *server = &stats->servers[i];

		if (!dropped[i] || server->dbid != seen[i].dbid ||
			server->serverid != seen[i].serverid)
			continue;
		server->dbid = InvalidOid;
		server->serverid = InvalidOid;
		stats->warned_full = false;
	}
	LWLockRelease(stats->lock);
	pfree(seen);
	pfree(dropped);
}

/*
 * Give a free slot to a server of this database, if there is one.  The
 * caller holds the lock exclusively.
 */
static RedisServerStats *
take_slot(Oid serverid)
{
	RedisServerStats *server = NULL;
	int			i;

	for (i = 0; i < stats->nservers && server == NULL; i++)
		if (!OidIsValid(stats->servers[i].serverid))
			server = &stats->servers[i];
	if (server == NULL && stats->nservers < MAX_COUNTED_SERVERS)
		server = &stats->servers[stats->nservers++];
	if (server == NULL)
		return NULL;
	server->dbid = MyDatabaseId;
	server->serverid = serverid;
	server->stats_reset = 0;
	for (i = 0; i < REDIS_NUM_STATS; i++)
		pg_atomic_init_u64(&server->counters[i], 0);
	return server;
}

/*
 * The counters of a server of this database, given a slot at its first
 * use; NULL without the preload, or when no slot is free even after the
 * slots of dropped servers were taken back.  That is said once, until a
 * slot is free again.
 */
RedisServerStats *
redis_server_stats(Oid serverid, const char *servername)
{
	RedisServerStats *server;
	bool		warn = false;
	int			attempt;

	if (stats == NULL)
		return NULL;
	LWLockAcquire(stats->lock, LW_SHARED);
	server = find_server(serverid);
	LWLockRelease(stats->lock);

	for (attempt = 0; server == NULL && attempt < 2; attempt++)
	{
		if (attempt > 0)
			free_dropped_slots();
		LWLockAcquire(stats->lock, LW_EXCLUSIVE);
		server = find_server(serverid);
		if (server == NULL)
			server = take_slot(serverid);
		if (server == NULL && attempt > 0 && !stats->warned_full)
			warn = stats->warned_full = true;
		LWLockRelease(stats->lock);
	}
	if (warn)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("redislock cannot count the use of more than %d foreign servers",
						MAX_COUNTED_SERVERS),
				 errdetail("redis_stats() shows zeros for foreign server \"%s\", and for the others used from now on, until a counted server or its database is dropped.",
						   servername)));
	return server;
}

/*
 * Add n to a counter of server serverid in stats, its counters when they
 * were taken (NULL without the preload), unless they were given away since
 */
void
stats_count(RedisServerStats *stats, Oid serverid, RedisStat stat, int64 n)
{
	if (stats != NULL && stats->serverid == serverid)
		pg_atomic_fetch_add_u64(&stats->counters[stat], n);
}

/* A server's counters as read, for a row */
typedef struct ServerCounts
{
	Oid			serverid;
	TimestampTz stats_reset;
	uint64		counters[REDIS_NUM_STATS];
} ServerCounts;

/* Read the counters of this database's servers; returns how many */
static int
read_counts(ServerCounts *counts)
{
	int			n = 0;
	int			i;
	int			c;

	LWLockAcquire(stats->lock, LW_SHARED);
	for (i = 0; i < stats->nservers; i++)
	{
		RedisServerStats *server = &stats->servers[i];

		if (server->dbid != MyDatabaseId)
			continue;
		counts[n].serverid = server->serverid;
		counts[n].stats_reset = server->stats_reset;
		for (c = 0; c < REDIS_NUM_STATS; c++)
			counts[n].counters[c] = pg_atomic_read_u64(&server->counters[c]);
		n++;
	}
	LWLockRelease(stats->lock);
	return n;
}

/*
 * The row of one server: its name, its counters, when they were reset.
 * An installation that was not updated yet declares the columns of its
 * version, with fewer counters, and gets those.
 */
static void
put_server_row(ReturnSetInfo *rsinfo, const NameData *servername,
			   const ServerCounts *counts)
{
	Datum		values[REDIS_NUM_STATS + 2];
	bool		nulls[REDIS_NUM_STATS + 2] = {false};
	int			ncounters = Min(REDIS_NUM_STATS, rsinfo->setDesc->natts - 2);
	int			c;

	values[0] = NameGetDatum(servername);
	for (c = 0; c < ncounters; c++)
		values[c + 1] = Int64GetDatum(counts ? (int64) counts->counters[c] : 0);
	values[ncounters + 1] =
		TimestampTzGetDatum(counts ? counts->stats_reset : 0);
	nulls[ncounters + 1] = counts == NULL || counts->stats_reset == 0;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * redis_stats(): a row per foreign server of redislock in this database,
 * with what was counted for it since the server started, or since
 * redis_stats_reset().  A server never used has zeros.
 */
Datum
redis_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ForeignDataWrapper *fdw;
	ServerCounts *counts;
	int			ncounts;
	Relation	rel;
	SysScanDesc scan;
	HeapTuple	tuple;
	int			i;

	redis_require_preload("redis_stats");
	InitMaterializedSRF(fcinfo, 0);
	counts = palloc(sizeof(ServerCounts) * MAX_COUNTED_SERVERS);
	ncounts = read_counts(counts);

	fdw = GetForeignDataWrapperByName("redislock", false);
	rel = table_open(ForeignServerRelationId, AccessShareLock);
	scan = systable_beginscan(rel, InvalidOid, false, NULL, 0, NULL);
	while (HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		Form_pg_foreign_server server = (Form_pg_foreign_server) GETSTRUCT(tuple);
		const ServerCounts *found = NULL;

		if (server->srvfdw != fdw->fdwid)
			continue;
		for (i = 0; i < ncounts && found == NULL; i++)
			if (counts[i].serverid == server->oid)
				found = &counts[i];
		put_server_row(rsinfo, &server->srvname, found);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return (Datum) 0;
}

/*
 * redis_stats_reset(): start the counters of this database's servers
 * again from zero.
 */
Datum
redis_stats_reset(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	int			i;
	int			c;

	redis_require_preload("redis_stats_reset");
	LWLockAcquire(stats->lock, LW_EXCLUSIVE);
	for (i = 0; i < stats->nservers; i++)
	{
		RedisServerStats *server = &stats->servers[i];

		if (server->dbid != MyDatabaseId)
			continue;
		for (c = 0; c < REDIS_NUM_STATS; c++)
			pg_atomic_write_u64(&server->counters[c], 0);
		server->stats_reset = now;
	}
	LWLockRelease(stats->lock);
	PG_RETURN_VOID();
}
