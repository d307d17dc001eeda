/*-------------------------------------------------------------------------
 *
 * connection.c
 *		The connection cache: one entry per foreign server and user.
 *
 * Entries are made on first use from the catalog's foreign server and user
 * mapping, in the manner of postgres_fdw, and reused across transactions.
 * A change of the server or user mapping closes the entry's connection as
 * soon as nothing of it is in use (when the backend processes the
 * invalidation, or else at the end of the transaction that uses it), and
 * the next use reads the options again.  The users found allowed to use a
 * server are remembered until a catalog change could make them not.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/parallel.h"
#include "access/reloptions.h"
#include "access/xact.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_user_mapping.h"
#include "foreign/foreign.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"

#include "guc.h"
#include "scripts.h"
#include "server/server.h"

static void redis_conn_disconnect(RedisConn *conn);

/* Every connection entry of this backend, retired ones included */
static dlist_head connections = DLIST_STATIC_INIT(connections);

/*
 * redislock.server resolved to an OID, kept until the setting names another
 * server or a foreign server changes: a lookup by name on every call would
 * be the largest cost of a call besides Redis itself.
 */
static char server_name_resolved[NAMEDATALEN];
static Oid	server_oid_resolved = InvalidOid;

/* A user found to have USAGE on a server */
typedef struct UsageGrant
{
	Oid			serverid;
	Oid			userid;
} UsageGrant;

/*
 * The UsageGrants found so far, in TopMemoryContext: checking the ACL,
 * with the role memberships it takes, costs more than the rest of finding
 * the connection.  Forgotten on any change of a server (its ACL or owner),
 * of a role or of role membership, or of a database (the owner that
 * pg_database_owner stands for): the same catalog changes that make
 * PostgreSQL's own ACL checks look again.
 */
static List *usage_grants = NIL;

/* How often usage_grants was forgotten: a check that saw it happen is stale */
static uint64 usage_grants_forgotten = 0;

PG_FUNCTION_INFO_V1(redis_connections);
PG_FUNCTION_INFO_V1(redis_disconnect);
PG_FUNCTION_INFO_V1(redis_disconnect_all);
PG_FUNCTION_INFO_V1(redis_server_nodes);

/* Is the entry in use: holding locks or decrements, or used by the xact? */
static bool
conn_in_use(const RedisConn *conn)
{
	return conn->pins > 0 || conn->used_in_xact;
}

/*
 * Catalog invalidation: a changed foreign server or user mapping makes the
 * next SQL call re-read the options, and closes the connections that
 * nothing uses, so that no socket stays authenticated with credentials that
 * were changed or dropped.  Entries themselves stay: a caller may hold one.
 */
static void
invalidate_connections(Datum arg, int cacheid, uint32 hashvalue)
{
	dlist_iter	iter;

	if (cacheid == FOREIGNSERVEROID)
		server_oid_resolved = InvalidOid;

	dlist_foreach(iter, &connections)
	{
		RedisConn  *conn = dlist_container(RedisConn, node_link, iter.cur);

		if (hashvalue == 0 || cacheid == USERMAPPINGOID ||
			conn->server_hashvalue == hashvalue)
		{
			conn->invalidated = true;
			if (!conn_in_use(conn))
				redis_conn_disconnect(conn);
		}
	}
}

/* A catalog change that may take USAGE away: check every user again */
static void
forget_usage_grants(Datum arg, int cacheid, uint32 hashvalue)
{
	list_free_deep(usage_grants);
	usage_grants = NIL;
	usage_grants_forgotten++;
}

void
redislock_init_connections(void)
{
	CacheRegisterSyscacheCallback(FOREIGNSERVEROID, invalidate_connections,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(USERMAPPINGOID, invalidate_connections,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(FOREIGNSERVEROID, forget_usage_grants,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(AUTHOID, forget_usage_grants, (Datum) 0);
	CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, forget_usage_grants,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(DATABASEOID, forget_usage_grants,
								  (Datum) 0);
}

/* Options of the user mapping for userid (or PUBLIC) on serverid, if any */
static List *
user_mapping_options(Oid userid, Oid serverid)
{
	HeapTuple	tuple;
	Datum		datum;
	bool		isnull;
	List	   *options = NIL;

	tuple = SearchSysCache2(USERMAPPINGUSERSERVER,
							ObjectIdGetDatum(userid),
							ObjectIdGetDatum(serverid));
	if (!HeapTupleIsValid(tuple))
		tuple = SearchSysCache2(USERMAPPINGUSERSERVER,
								ObjectIdGetDatum(InvalidOid),
								ObjectIdGetDatum(serverid));
	if (!HeapTupleIsValid(tuple))
		return NIL;

	datum = SysCacheGetAttr(USERMAPPINGUSERSERVER, tuple,
							Anum_pg_user_mapping_umoptions, &isnull);
	if (!isnull)
		options = untransformRelOptions(datum);
	ReleaseSysCache(tuple);
	return options;
}

/* Is any node of the entry connected? */
static bool
redis_conn_is_connected(const RedisConn *conn)
{
	int			i;

	for (i = 0; i < conn->nnodes; i++)
		if (node_is_connected(conn->nodes[i]))
			return true;
	return false;
}

/* Close the connections to every node of the entry, subscribers too */
static void
redis_conn_disconnect(RedisConn *conn)
{
	ListCell   *lc;
	int			i;

	for (i = 0; i < conn->nnodes; i++)
		node_disconnect(conn->nodes[i]);
	foreach(lc, conn->subscribers)
		node_disconnect(lfirst(lc));
}

/* Free a connection entry that is no longer wanted */
static void
free_connection(RedisConn *conn)
{
	ListCell   *lc;
	int			i;

	for (i = 0; i < conn->nnodes; i++)
		node_destroy(conn->nodes[i]);
	foreach(lc, conn->subscribers)
		node_destroy(lfirst(lc));
	dlist_delete(&conn->node_link);
	MemoryContextDelete(conn->cxt);
	pfree(conn);
}

/* A copy of an option string that may be unset, which pstrdup() refuses */
static char *
copy_option(const char *value)
{
	return value != NULL ? pstrdup(value) : NULL;
}

/*
 * Give conn a copy of the options, its topology, and the nodes they name:
 * a single server's one node, a cluster's seeds, the Sentinels or the
 * masters.
 */
static void
set_options(RedisConn *conn, const RedisServerOptions *opts)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(conn->cxt);

	conn->database = opts->database;
	conn->key_prefix = pstrdup(opts->key_prefix);
	conn->username = copy_option(opts->username);
	conn->password = copy_option(opts->password);
	conn->sentinel_master = copy_option(opts->sentinel_master);
	conn->sentinel_username = copy_option(opts->sentinel_username);
	conn->sentinel_password = copy_option(opts->sentinel_password);
	conn->min_replicas = opts->min_replicas;
	conn->replica_timeout = opts->replica_timeout;

	redis_conn_init_topology(conn, opts);
	MemoryContextSwitchTo(oldcxt);
}

static RedisConn *
new_connection(ForeignServer *server, Oid userid)
{
	RedisConn  *conn = MemoryContextAllocZero(TopMemoryContext,
											  sizeof(RedisConn));
	MemoryContext oldcxt;

	conn->serverid = server->serverid;
	conn->userid = userid;
	conn->server_hashvalue = GetSysCacheHashValue1(FOREIGNSERVEROID,
												   ObjectIdGetDatum(server->serverid));
	conn->cxt = AllocSetContextCreate(TopMemoryContext,
									  "redislock connection options",
									  ALLOCSET_SMALL_SIZES);
	oldcxt = MemoryContextSwitchTo(conn->cxt);
	conn->servername = pstrdup(server->servername);
	MemoryContextSwitchTo(oldcxt);
	conn->stats = redis_server_stats(server->serverid, server->servername);
	dlist_push_tail(&connections, &conn->node_link);
	return conn;
}

/* Was userid found allowed to use serverid, since the last change? */
static bool
usage_granted(Oid serverid, Oid userid)
{
	ListCell   *lc;

	foreach(lc, usage_grants)
	{
		UsageGrant *grant = lfirst(lc);

		if (grant->serverid == serverid && grant->userid == userid)
			return true;
	}
	return false;
}

/* Remember that userid was found allowed to use serverid */
static void
remember_usage_grant(Oid serverid, Oid userid)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	UsageGrant *grant = palloc(sizeof(UsageGrant));

	grant->serverid = serverid;
	grant->userid = userid;
	usage_grants = lappend(usage_grants, grant);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Check that the current user may use the server.  The current user is
 * asked for each time (SET ROLE and SECURITY DEFINER change it); whether
 * it may is remembered until a catalog change could alter the answer (see
 * usage_grants), which the backend learns when PostgreSQL's own checks
 * would see the change.
 */
static void
check_server_usage(Oid serverid, const char *servername)
{
	uint64		forgotten = usage_grants_forgotten;
	AclResult	aclresult;

	if (usage_granted(serverid, GetUserId()))
		return;
	aclresult = object_aclcheck(ForeignServerRelationId, serverid,
								GetUserId(), ACL_USAGE);
	if (aclresult != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for foreign server %s", servername),
				 errhint("An administrator can allow its use with GRANT USAGE ON FOREIGN SERVER %s TO %s.",
						 quote_identifier(servername),
						 quote_identifier(GetUserNameFromId(GetUserId(), false)))));
	/* a change that came while the catalog was read may have been missed */
	if (usage_grants_forgotten == forgotten)
		remember_usage_grant(serverid, GetUserId());
}

/*
 * The OID of the foreign server named by redislock.server, after checking
 * that the current user may use it.
 */
static Oid
current_server_oid(void)
{
	Oid			serverid = server_oid_resolved;

	if (!OidIsValid(serverid) ||
		strcmp(server_name_resolved, redislock_server_name) != 0)
	{
		serverid = get_foreign_server_oid(redislock_server_name, true);
		strlcpy(server_name_resolved, redislock_server_name, NAMEDATALEN);
		server_oid_resolved = serverid;
	}

	if (!OidIsValid(serverid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("foreign server \"%s\" does not exist",
						redislock_server_name),
				 errhint("Set redislock.server to a foreign server of the foreign data wrapper redislock.")));
	check_server_usage(serverid, redislock_server_name);
	return serverid;
}

/* A new connection entry with the catalog's current options */
static RedisConn *
connection_from_catalog(Oid serverid, Oid userid)
{
	ForeignServer *server = GetForeignServer(serverid);
	ForeignDataWrapper *fdw = GetForeignDataWrapper(server->fdwid);
	RedisServerOptions opts;
	RedisConn  *conn;

	if (strcmp(fdw->fdwname, "redislock") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("foreign server \"%s\" does not belong to foreign data wrapper redislock",
						server->servername)));

	/* read first: an option that fails its check leaves no entry behind */
	redis_read_options(&opts, server->options,
					   user_mapping_options(userid, serverid));
	conn = new_connection(server, userid);
	set_options(conn, &opts);
	return conn;
}

/*
 * A new entry, with the catalog's current options, to use instead of conn
 * (NULL, or one whose server or user mapping changed).  An old entry still
 * pinned by held locks is retired rather than changed, so that its locks
 * are released where they were taken; its connection is closed once they
 * are.
 */
static RedisConn *
refreshed_connection(RedisConn *conn, Oid serverid, Oid userid)
{
	RedisConn  *fresh = connection_from_catalog(serverid, userid);

	if (conn == NULL)
		return fresh;
	if (conn->pins > 0)
		conn->retired = true;
	else
		free_connection(conn);
	return fresh;
}

/*
 * The connection entry for serverid and userid, whose user mapping it
 * uses, with options re-read from the catalog when they may have changed.
 * It is not necessarily connected: redis_run() connects.  SQL functions
 * use the current user's, after checking its privileges; the lease
 * watchdog uses the user mapping that the lock's holder used.
 */
static RedisConn *
redis_conn_for_user(Oid serverid, Oid userid)
{
	RedisConn  *conn = NULL;
	dlist_iter	iter;

	redislock_init_scripts();
	dlist_foreach(iter, &connections)
	{
		RedisConn  *candidate = dlist_container(RedisConn, node_link, iter.cur);

		if (!candidate->retired && candidate->serverid == serverid &&
			candidate->userid == userid)
		{
			conn = candidate;
			break;
		}
	}
	if (conn == NULL || conn->invalidated)
		conn = refreshed_connection(conn, serverid, userid);
	return conn;
}

/*
 * redis_conn_for_user() for a background worker: the connection entry of
 * serverid and userid, or NULL (logged) when it cannot be had: the server
 * was dropped, or its options are no longer valid.  It is found in a
 * subtransaction of the current transaction, so that the failure of one
 * server leaves the worker's work on the others alone.
 */
RedisConn *
redis_conn_for_worker(Oid serverid, Oid userid)
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

/*
 * Locks and decrements belong to the backend that made them and end with
 * its transaction, so a parallel worker, whose state ends before the
 * leader's transaction does, is refused, even where a PARALLEL SAFE wrapper
 * brought the call.
 */
static void
refuse_parallel_worker(void)
{
	if (IsParallelWorker())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("cannot use Redis locks or stock in a parallel worker"),
				 errhint("Mark functions that call redislock PARALLEL UNSAFE, as its own are.")));
}

/* The connection entry for redislock.server and the current user */
RedisConn *
redis_conn_current(void)
{
	RedisConn  *conn;

	refuse_parallel_worker();
	conn = redis_conn_for_user(current_server_oid(), GetUserId());
	conn->used_in_xact = true;
	return conn;
}

/*
 * Check, before a call on conn, what redis_conn_current() checks for the
 * server of redislock.server: for work on whatever servers the backend's
 * locks are on.
 */
void
redis_conn_check_usage(const RedisConn *conn)
{
	refuse_parallel_worker();
	check_server_usage(conn->serverid, conn->servername);
}

/* A held lock or a pending stock decrement keeps its connection */
void
redis_conn_pin(RedisConn *conn)
{
	conn->pins++;
}

void
redis_conn_unpin(RedisConn *conn)
{
	Assert(conn->pins > 0);
	if (--conn->pins == 0 && conn->retired)
		free_connection(conn);
}


/*
 * At the end of a transaction, close the connections whose server or user
 * mapping changed while the transaction used them.
 */
void
redis_conns_end_xact(void)
{
	dlist_iter	iter;

	dlist_foreach(iter, &connections)
	{
		RedisConn  *conn = dlist_container(RedisConn, node_link, iter.cur);

		conn->used_in_xact = false;
		if ((conn->invalidated || conn->retired) && !conn_in_use(conn))
			redis_conn_disconnect(conn);
	}
}

/*
 * redis_connections(): this backend's open connections, as
 * postgres_fdw_get_connections() shows its own.  valid is false for a
 * connection whose server or user mapping changed while it was in use; it
 * is closed once nothing uses it.
 */
Datum
redis_connections(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	dlist_iter	iter;

	InitMaterializedSRF(fcinfo, 0);
	dlist_foreach(iter, &connections)
	{
		RedisConn  *conn = dlist_container(RedisConn, node_link, iter.cur);
		ForeignServer *server = GetForeignServerExtended(conn->serverid,
														 FSV_MISSING_OK);
		int			i;

		for (i = 0; i < conn->nnodes; i++)
		{
			Datum		values[5];
			bool		nulls[5] = {false};

			if (!node_is_connected(conn->nodes[i]))
				continue;
			if (server != NULL)
				values[0] = DirectFunctionCall1(namein,
												CStringGetDatum(server->servername));
			else
				nulls[0] = true;
			values[1] = CStringGetTextDatum(conn->nodes[i]->endpoint);
			values[2] = DirectFunctionCall1(namein,
											CStringGetDatum(GetUserNameFromId(conn->userid, false)));
			values[3] = BoolGetDatum(conn_in_use(conn));
			values[4] = BoolGetDatum(!conn->invalidated && !conn->retired);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values,
								 nulls);
		}
	}
	return (Datum) 0;
}

/*
 * Close the connections of serverid (every server when InvalidOid) that
 * nothing uses; those in use get a warning.  True when one was closed.
 */
static bool
disconnect_unused(Oid serverid)
{
	bool		closed = false;
	dlist_iter	iter;

	dlist_foreach(iter, &connections)
	{
		RedisConn  *conn = dlist_container(RedisConn, node_link, iter.cur);

		if ((OidIsValid(serverid) && conn->serverid != serverid) ||
			!redis_conn_is_connected(conn))
			continue;
		if (conn_in_use(conn))
		{
			ForeignServer *server = GetForeignServerExtended(conn->serverid,
															 FSV_MISSING_OK);

			ereport(WARNING,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("cannot close connection for server \"%s\" because it is still in use",
							server ? server->servername : conn->nodes[0]->endpoint),
					 errdetail("It holds Redis locks or stock decrements, or the current transaction used it.")));
			continue;
		}
		redis_conn_disconnect(conn);
		closed = true;
	}
	return closed;
}

/* redis_disconnect(server): close this backend's connections to server */
Datum
redis_disconnect(PG_FUNCTION_ARGS)
{
	ForeignServer *server;

	require_argument(fcinfo, 0, "server");
	server = GetForeignServerByName(NameStr(*PG_GETARG_NAME(0)), false);
	PG_RETURN_BOOL(disconnect_unused(server->serverid));
}

/* redis_disconnect_all(): close every connection of this backend */
Datum
redis_disconnect_all(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(disconnect_unused(InvalidOid));
}

/*
 * redis_server_nodes(server): the nodes this backend knows of a server
 * (that of redislock.server when NULL), as (endpoint, role, slots,
 * connected, software, version).  It shows what the backend last learned
 * and asks Redis nothing.  The function of 1.2 and before, which has no
 * software and version, gets the columns it asks for.
 */
Datum
redis_server_nodes(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RedisConn  *conn;
	int			i;

	if (PG_ARGISNULL(0))
		conn = redis_conn_for_user(current_server_oid(), GetUserId());
	else
	{
		ForeignServer *server = GetForeignServerByName(NameStr(*PG_GETARG_NAME(0)),
													   false);

		check_server_usage(server->serverid, server->servername);
		conn = redis_conn_for_user(server->serverid, GetUserId());
	}

	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < conn->nnodes; i++)
	{
		RedisNode  *node = conn->nodes[i];
		char	   *slots = conn->topology->node_slots ?
			conn->topology->node_slots(conn, i) : NULL;
		Datum		values[6];
		bool		nulls[6] = {false};

		values[0] = CStringGetTextDatum(node->endpoint);
		values[1] = CStringGetTextDatum(node->role);
		if (slots != NULL)
			values[2] = CStringGetTextDatum(slots);
		else
			nulls[2] = true;
		values[3] = BoolGetDatum(node_is_connected(node));
		nulls[4] = node->server_name == NULL;
		if (!nulls[4])
			values[4] = CStringGetTextDatum(node->server_name);
		nulls[5] = node->server_version == NULL;
		if (!nulls[5])
			values[5] = CStringGetTextDatum(node->server_version);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
