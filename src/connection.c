/*-------------------------------------------------------------------------
 *
 * connection.c
 *		Connections to Redis servers and the one way commands reach them.
 *
 * Connections are cached per foreign server and user, opened on first use
 * and reused across transactions, in the manner of postgres_fdw.  Commands
 * go out through redis_run(), which pipelines a batch of calls in one round
 * trip, runs scripts with EVALSHA and transparently reloads them when Redis
 * answers NOSCRIPT.  A timeout or I/O failure drops the connection, since a
 * late reply would otherwise be taken as the answer to the next command;
 * the call is never re-sent because its outcome is unknown.
 *
 * Failures are reported at the caller's elevel: ERROR from SQL functions,
 * WARNING from transaction callbacks, which must not fail.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "access/reloptions.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_user_mapping.h"
#include "commands/defrem.h"
#include "foreign/foreign.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/wait_event.h"

#include "redislock.h"

/* Every connection entry of this backend, retired ones included */
static dlist_head connections = DLIST_STATIC_INIT(connections);

/*
 * redislock.server resolved to an OID, kept until the setting names another
 * server or a foreign server changes: a lookup by name on every call would
 * be the largest cost of a call besides Redis itself.
 */
static char server_name_resolved[NAMEDATALEN];
static Oid	server_oid_resolved = InvalidOid;

static bool exchange(RedisConn *conn, RedisCall *calls, int ncalls,
					 int elevel);

static struct timeval
ms_to_timeval(int ms)
{
	struct timeval tv;

	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	return tv;
}

/* Close the socket; the next command reconnects */
static void
disconnect(RedisConn *conn)
{
	if (conn->ctx != NULL)
	{
		redisFree(conn->ctx);
		conn->ctx = NULL;
		ReleaseExternalFD();
	}
}

/*
 * Apply redislock.command_timeout to the socket when it changed.  hiredis
 * turns it into SO_RCVTIMEO/SO_SNDTIMEO, which bounds every blocking read
 * and write: this is what keeps commit and abort callbacks, which run with
 * interrupts held, from hanging on a dead Redis.
 */
static void
apply_command_timeout(RedisConn *conn)
{
	if (conn->applied_timeout != redislock_command_timeout)
	{
		redisSetTimeout(conn->ctx, ms_to_timeval(redislock_command_timeout));
		conn->applied_timeout = redislock_command_timeout;
	}
}

/*
 * Authenticate and select the database, pipelined in one round trip.
 * Returns false (after reporting at elevel) when Redis refuses.
 */
static bool
handshake(RedisConn *conn, int elevel)
{
	RedisCall	calls[2];
	RedisCall  *auth = NULL;
	int			ncalls = 0;
	int			i;

	if (conn->password != NULL)
	{
		auth = &calls[ncalls++];
		redis_call_init(auth, conn, NULL);
		redis_call_arg(auth, "AUTH", 4);
		if (conn->username != NULL)
			redis_call_arg(auth, conn->username, strlen(conn->username));
		redis_call_arg(auth, conn->password, strlen(conn->password));
	}
	if (conn->database != 0)
	{
		RedisCall  *select = &calls[ncalls++];

		redis_call_init(select, conn, NULL);
		redis_call_arg(select, "SELECT", 6);
		redis_call_int_arg(select, conn->database);
	}
	if (ncalls == 0)
		return true;
	if (!exchange(conn, calls, ncalls, elevel))
		return false;

	for (i = 0; i < ncalls; i++)
	{
		if (calls[i].reply_type != REDIS_REPLY_ERROR)
			continue;
		disconnect(conn);
		if (&calls[i] == auth)
			ereport(elevel,
					(errcode(ERRCODE_INVALID_PASSWORD),
					 errmsg("Redis server at %s refused authentication",
							conn->endpoint),
					 errdetail("Redis answered: %s", calls[i].str),
					 errhint("Check the username and password options of the user mapping.")));
		else
			ereport(elevel,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("Redis server at %s refused to select database %d",
							conn->endpoint, conn->database),
					 errdetail("Redis answered: %s", calls[i].str)));
		return false;
	}
	return true;
}

/* Connect if not connected.  Returns false after reporting at elevel. */
static bool
ensure_connected(RedisConn *conn, int elevel)
{
	redisContext *ctx;
	struct timeval timeout;

	if (conn->ctx != NULL)
		return true;

	if (!AcquireExternalFD())
	{
		ereport(elevel,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to Redis server at %s",
						conn->endpoint),
				 errdetail("There are too many open files on the local server."),
				 errhint("Raise the server's max_files_per_process and/or \"ulimit -n\" limits.")));
		return false;
	}

	timeout = ms_to_timeval(redislock_connect_timeout);
	pgstat_report_wait_start(redislock_wait_event);
	if (conn->unix_socket != NULL)
		ctx = redisConnectUnixWithTimeout(conn->unix_socket, timeout);
	else
		ctx = redisConnectWithTimeout(conn->host, conn->port, timeout);
	pgstat_report_wait_end();

	if (ctx == NULL || ctx->err)
	{
		char		reason[128];

		strlcpy(reason, ctx ? ctx->errstr : "out of memory", sizeof(reason));
		if (ctx != NULL)
			redisFree(ctx);
		ReleaseExternalFD();
		ereport(elevel,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to Redis server at %s: %s",
						conn->endpoint, reason),
				 errhint("Check that Redis is running and that the options of foreign server \"%s\" are right.",
						 redislock_server_name)));
		return false;
	}

	conn->ctx = ctx;
	conn->applied_timeout = -1;
	apply_command_timeout(conn);
	return handshake(conn, elevel);
}

/* Keep what the caller needs of a reply, then let hiredis free it */
static void
copy_reply(RedisCall *call, redisReply *reply)
{
	call->reply_type = reply->type;
	call->integer = reply->integer;
	call->str = NULL;
	call->len = 0;
	if (reply->type == REDIS_REPLY_STRING ||
		reply->type == REDIS_REPLY_STATUS ||
		reply->type == REDIS_REPLY_ERROR)
	{
		call->str = pnstrdup(reply->str, reply->len);
		call->len = reply->len;
	}
}

/* Append a RESP header: the marker, then the number, then CRLF */
static void
append_resp_header(StringInfo buf, char marker, uint64 number)
{
	char	   *p;

	enlargeStringInfo(buf, MAXINT8LEN + 3);
	p = buf->data + buf->len;
	*p++ = marker;
	p += pg_ulltoa_n(number, p);
	*p++ = '\r';
	*p++ = '\n';
	*p = '\0';
	buf->len = p - buf->data;
}

/* Append a RESP bulk string: binary safe, whatever the bytes */
static void
append_resp_bulk(StringInfo buf, const char *arg, size_t len)
{
	append_resp_header(buf, '$', len);
	enlargeStringInfo(buf, len + 2);
	memcpy(buf->data + buf->len, arg, len);
	buf->data[buf->len + len] = '\r';
	buf->data[buf->len + len + 1] = '\n';
	buf->len += len + 2;
	buf->data[buf->len] = '\0';
}

/*
 * Queue one call in hiredis' output buffer.  The command is encoded in RESP
 * here, in a buffer kept for the backend's life, rather than by hiredis'
 * printf-like formatter, which costs more than the rest of the call.
 */
static bool
append_call(RedisConn *conn, const RedisCall *call)
{
	static StringInfoData buf = {NULL};
	int			i;

	if (buf.data == NULL)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(TopMemoryContext);

		initStringInfo(&buf);
		MemoryContextSwitchTo(oldcxt);
	}
	resetStringInfo(&buf);

	append_resp_header(&buf, '*', call->argc + (call->script != NULL ? 3 : 0));
	if (call->script != NULL)
	{
		char		nkeys[12];

		append_resp_bulk(&buf, "EVALSHA", 7);
		append_resp_bulk(&buf, call->script->sha1, 40);
		append_resp_bulk(&buf, nkeys, pg_ltoa(call->nkeys, nkeys));
	}
	for (i = 0; i < call->argc; i++)
	{
		if (call->argv[i] == NULL)
		{
			char		intarg[MAXINT8LEN + 1];

			append_resp_bulk(&buf, intarg, pg_lltoa(call->intarg, intarg));
		}
		else
			append_resp_bulk(&buf, call->argv[i], call->argvlen[i]);
	}
	return redisAppendFormattedCommand(conn->ctx, buf.data, buf.len) == REDIS_OK;
}

/* Queue SCRIPT LOAD of a script */
static bool
append_script_load(RedisConn *conn, const RedisScript *script)
{
	RedisCall	load;

	redis_call_init(&load, conn, NULL);
	redis_call_arg(&load, "SCRIPT", 6);
	redis_call_arg(&load, "LOAD", 4);
	redis_call_arg(&load, script->body, strlen(script->body));
	return append_call(conn, &load);
}

/*
 * Report a failed exchange and drop the connection: after a timeout or an
 * I/O error the stream position is unknown.
 */
static void
report_io_failure(RedisConn *conn, int saved_errno, int elevel)
{
	char		reason[128];
	bool		timed_out;

	timed_out = (conn->ctx->err == REDIS_ERR_IO &&
				 (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK));
	strlcpy(reason, conn->ctx->errstr, sizeof(reason));
	disconnect(conn);

	if (timed_out)
		ereport(elevel,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("Redis server at %s did not answer within %d ms",
						conn->endpoint, redislock_command_timeout),
				 errdetail("The outcome of the command is unknown; it was not sent again."),
				 errhint("Raise redislock.command_timeout if Redis is only slow.")));
	else
		ereport(elevel,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("lost connection to Redis server at %s: %s",
						conn->endpoint, reason),
				 errdetail("The outcome of the command is unknown; it was not sent again.")));
}

/* Read the reply of one queued call */
static bool
read_reply(RedisConn *conn, RedisCall *call, int elevel)
{
	void	   *reply = NULL;
	int			rc;

	pgstat_report_wait_start(redislock_wait_event);
	errno = 0;
	rc = redisGetReply(conn->ctx, &reply);
	pgstat_report_wait_end();

	if (rc != REDIS_OK || reply == NULL)
	{
		report_io_failure(conn, errno, elevel);
		return false;
	}
	copy_reply(call, (redisReply *) reply);
	freeReplyObject(reply);
	return true;
}

/*
 * Send calls over a connected conn in one write and read all the replies:
 * one round trip whatever their number.
 */
static bool
exchange(RedisConn *conn, RedisCall *calls, int ncalls, int elevel)
{
	int			i;

	for (i = 0; i < ncalls; i++)
	{
		if (!append_call(conn, &calls[i]))
		{
			report_io_failure(conn, errno, elevel);
			return false;
		}
	}
	for (i = 0; i < ncalls; i++)
	{
		if (!read_reply(conn, &calls[i], elevel))
			return false;
	}
	return true;
}

static bool
is_noscript(const RedisCall *call)
{
	return call->script != NULL && redis_reply_is_error(call, "NOSCRIPT");
}

/*
 * Scripts Redis no longer has (it restarted, failed over or was told
 * SCRIPT FLUSH) answered NOSCRIPT and were not run, so they are safe to
 * send again.  Load each missing script and re-run those calls, pipelined
 * in one more round trip.
 */
static bool
rerun_noscript_calls(RedisConn *conn, RedisCall *calls, int ncalls, int elevel)
{
	const RedisScript *loaded[8];
	int			nloaded = 0;
	RedisCall  *load_replies;
	int			i;
	int			j;

	for (i = 0; i < ncalls; i++)
	{
		if (!is_noscript(&calls[i]))
			continue;
		for (j = 0; j < nloaded; j++)
			if (loaded[j] == calls[i].script)
				break;
		if (j == nloaded && nloaded < lengthof(loaded))
		{
			if (!append_script_load(conn, calls[i].script))
			{
				report_io_failure(conn, errno, elevel);
				return false;
			}
			loaded[nloaded++] = calls[i].script;
		}
	}
	if (nloaded == 0)
		return true;

	for (i = 0; i < ncalls; i++)
	{
		if (is_noscript(&calls[i]) && !append_call(conn, &calls[i]))
		{
			report_io_failure(conn, errno, elevel);
			return false;
		}
	}

	load_replies = palloc0(sizeof(RedisCall) * nloaded);
	for (j = 0; j < nloaded; j++)
	{
		if (!read_reply(conn, &load_replies[j], elevel))
			return false;
	}
	for (i = 0; i < ncalls; i++)
	{
		if (is_noscript(&calls[i]) && !read_reply(conn, &calls[i], elevel))
			return false;
	}
	return true;
}

/* Run calls on one connection, connecting first if needed */
static bool
run_pipeline(RedisConn *conn, RedisCall *calls, int ncalls, int elevel)
{
	if (!ensure_connected(conn, elevel))
		return false;
	apply_command_timeout(conn);
	return exchange(conn, calls, ncalls, elevel) &&
		rerun_noscript_calls(conn, calls, ncalls, elevel);
}

/*
 * Run calls on their connections: the calls of each connection go out
 * pipelined in one round trip.  Error replies are left for the caller to
 * interpret.  Returns false when a connection failed; the calls that got no
 * reply then have reply_type 0.
 */
bool
redis_run(RedisCall *calls, int ncalls, int elevel)
{
	bool		ok = true;
	bool	   *done;
	RedisCall  *group;
	int			i;

	for (i = 0; i < ncalls; i++)
		calls[i].reply_type = 0;

	/* Usually every call goes to one server: send them as they are */
	for (i = 1; i < ncalls; i++)
		if (calls[i].conn != calls[0].conn)
			break;
	if (i >= ncalls)
		return ncalls == 0 || run_pipeline(calls[0].conn, calls, ncalls, elevel);

	/* Otherwise run the calls of each server in turn, in a scratch copy */
	done = palloc0(sizeof(bool) * ncalls);
	group = palloc(sizeof(RedisCall) * ncalls);
	for (i = 0; i < ncalls; i++)
	{
		RedisConn  *conn = calls[i].conn;
		int			n = 0;
		int			j;

		if (done[i])
			continue;
		for (j = i; j < ncalls; j++)
			if (!done[j] && calls[j].conn == conn)
				group[n++] = calls[j];
		if (!run_pipeline(conn, group, n, elevel))
			ok = false;
		for (j = i, n = 0; j < ncalls; j++)
		{
			if (!done[j] && calls[j].conn == conn)
			{
				calls[j] = group[n++];
				done[j] = true;
			}
		}
	}
	pfree(done);
	pfree(group);
	return ok;
}

/*
 * Connect now, raising an ERROR on failure.  Callers use it before a
 * command whose failure after sending leaves state to clean up, so that a
 * Redis that cannot even be reached is told apart from an unknown outcome.
 */
void
redis_conn_connect(RedisConn *conn)
{
	ensure_connected(conn, ERROR);
}

void
redis_call_init(RedisCall *call, RedisConn *conn, const RedisScript *script)
{
	memset(call, 0, sizeof(RedisCall));
	call->conn = conn;
	call->script = script;
}

/* Add an argument; the caller keeps arg alive until the call has run */
void
redis_call_arg(RedisCall *call, const char *arg, size_t len)
{
	Assert(call->argc < REDIS_CALL_MAX_ARGS);
	call->argv[call->argc] = arg;
	call->argvlen[call->argc++] = len;
}

/*
 * Add an integer argument.  It is kept in the call and formatted only when
 * the call is sent, which spares an allocation per command; a call has at
 * most one.
 */
void
redis_call_int_arg(RedisCall *call, int64 value)
{
	Assert(call->argc < REDIS_CALL_MAX_ARGS);
	call->intarg = value;
	call->argv[call->argc] = NULL;
	call->argvlen[call->argc++] = 0;
}

/* Is the reply an error reply whose code (first word) is code? */
bool
redis_reply_is_error(const RedisCall *call, const char *code)
{
	size_t		len = strlen(code);

	return call->reply_type == REDIS_REPLY_ERROR &&
		call->len >= len &&
		strncmp(call->str, code, len) == 0 &&
		(call->len == len || call->str[len] == ' ');
}

/* Report a reply that the caller did not expect, such as WRONGTYPE */
void
redis_unexpected_reply(const RedisCall *call, const char *key, int elevel)
{
	if (redis_reply_is_error(call, "NOAUTH"))
		ereport(elevel,
				(errcode(ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION),
				 errmsg("Redis server at %s requires authentication",
						call->conn->endpoint),
				 errhint("Give the password in a user mapping: CREATE USER MAPPING FOR CURRENT_USER SERVER %s OPTIONS (password '...').",
						 quote_identifier(redislock_server_name))));
	else if (call->reply_type == REDIS_REPLY_ERROR)
		ereport(elevel,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("Redis command on key \"%s\" failed: %s", key, call->str),
				 errdetail("The command ran at Redis server %s.",
						   call->conn->endpoint)));
	else
		ereport(elevel,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("unexpected Redis reply of type %d for key \"%s\"",
						call->reply_type, key),
				 errdetail("The command ran at Redis server %s.",
						   call->conn->endpoint)));
}

/*
 * Catalog invalidation: a changed foreign server or user mapping makes the
 * next SQL call re-read the options.  Connections are not closed here, as
 * a callback may run in the middle of a command.
 */
static void
invalidate_connections(Datum arg, int cacheid, uint32 hashvalue)
{
	dlist_iter	iter;

	if (cacheid == FOREIGNSERVEROID)
		server_oid_resolved = InvalidOid;

	dlist_foreach(iter, &connections)
	{
		RedisConn  *conn = dlist_container(RedisConn, node, iter.cur);

		if (hashvalue == 0 || cacheid == USERMAPPINGOID ||
			conn->server_hashvalue == hashvalue)
			conn->invalidated = true;
	}
}

void
redislock_init_connections(void)
{
	CacheRegisterSyscacheCallback(FOREIGNSERVEROID, invalidate_connections,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(USERMAPPINGOID, invalidate_connections,
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

/* Free a connection entry that is no longer wanted */
static void
free_connection(RedisConn *conn)
{
	disconnect(conn);
	dlist_delete(&conn->node);
	MemoryContextDelete(conn->cxt);
	pfree(conn);
}

/* Replace conn's option copy with the options of the catalog */
static void
set_options(RedisConn *conn, ForeignServer *server, List *mapping_options)
{
	MemoryContext oldcxt;
	ListCell   *lc;

	MemoryContextReset(conn->cxt);
	oldcxt = MemoryContextSwitchTo(conn->cxt);

	conn->host = pstrdup("127.0.0.1");
	conn->port = 6379;
	conn->unix_socket = NULL;
	conn->database = 0;
	conn->key_prefix = pstrdup("");
	conn->username = NULL;
	conn->password = NULL;

	foreach(lc, list_concat(list_copy(server->options), mapping_options))
	{
		DefElem    *def = (DefElem *) lfirst(lc);
		char	   *value = pstrdup(defGetString(def));

		if (strcmp(def->defname, "host") == 0)
			conn->host = value;
		else if (strcmp(def->defname, "port") == 0)
			conn->port = pg_strtoint32(value);
		else if (strcmp(def->defname, "unix_socket") == 0)
			conn->unix_socket = value;
		else if (strcmp(def->defname, "database") == 0)
			conn->database = pg_strtoint32(value);
		else if (strcmp(def->defname, "key_prefix") == 0)
			conn->key_prefix = value;
		else if (strcmp(def->defname, "username") == 0)
			conn->username = value;
		else if (strcmp(def->defname, "password") == 0)
			conn->password = value;
	}

	if (conn->unix_socket != NULL)
		conn->endpoint = psprintf("%s", conn->unix_socket);
	else
		conn->endpoint = psprintf("%s:%d", conn->host, conn->port);

	MemoryContextSwitchTo(oldcxt);
}

static bool
same_string(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

/* Would a connection made with b's options reach the same place as a's? */
static bool
same_options(const RedisConn *a, const RedisConn *b)
{
	return same_string(a->host, b->host) &&
		a->port == b->port &&
		same_string(a->unix_socket, b->unix_socket) &&
		a->database == b->database &&
		same_string(a->key_prefix, b->key_prefix) &&
		same_string(a->username, b->username) &&
		same_string(a->password, b->password);
}

static RedisConn *
new_connection(Oid serverid, Oid userid)
{
	RedisConn  *conn = MemoryContextAllocZero(TopMemoryContext,
											  sizeof(RedisConn));

	conn->serverid = serverid;
	conn->userid = userid;
	conn->server_hashvalue = GetSysCacheHashValue1(FOREIGNSERVEROID,
												   ObjectIdGetDatum(serverid));
	conn->cxt = AllocSetContextCreate(TopMemoryContext,
									  "redislock connection options",
									  ALLOCSET_SMALL_SIZES);
	dlist_push_tail(&connections, &conn->node);
	return conn;
}

/*
 * The OID of the foreign server named by redislock.server, after checking
 * that the current user may use it.  Privileges are checked on every call,
 * as role membership can change without any catalog event we would see.
 */
static Oid
current_server_oid(void)
{
	Oid			serverid = server_oid_resolved;
	AclResult	aclresult;

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

#if PG_VERSION_NUM >= 160000
	aclresult = object_aclcheck(ForeignServerRelationId, serverid,
								GetUserId(), ACL_USAGE);
#else
	aclresult = pg_foreign_server_aclcheck(serverid, GetUserId(), ACL_USAGE);
#endif
	if (aclresult != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for foreign server %s",
						redislock_server_name),
				 errhint("An administrator can allow its use with GRANT USAGE ON FOREIGN SERVER %s TO %s.",
						 quote_identifier(redislock_server_name),
						 quote_identifier(GetUserNameFromId(GetUserId(), false)))));
	return serverid;
}

/* A new connection entry with the catalog's current options */
static RedisConn *
connection_from_catalog(Oid serverid, Oid userid)
{
	ForeignServer *server = GetForeignServer(serverid);
	ForeignDataWrapper *fdw = GetForeignDataWrapper(server->fdwid);
	RedisConn  *conn;

	if (strcmp(fdw->fdwname, "redislock") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("foreign server \"%s\" does not belong to foreign data wrapper redislock",
						server->servername)));

	conn = new_connection(serverid, userid);
	set_options(conn, server, user_mapping_options(userid, serverid));
	return conn;
}

/*
 * The connection entry for redislock.server and the current user, with
 * options re-read from the catalog when they may have changed.  It is not
 * necessarily connected: redis_run() connects.  An entry still pinned by
 * held locks is retired rather than changed, so that its locks are released
 * where they were taken.
 */
RedisConn *
redis_conn_current(void)
{
	Oid			serverid = current_server_oid();
	Oid			userid = GetUserId();
	RedisConn  *conn = NULL;
	RedisConn  *fresh;
	dlist_iter	iter;

	dlist_foreach(iter, &connections)
	{
		RedisConn  *candidate = dlist_container(RedisConn, node, iter.cur);

		if (!candidate->retired && candidate->serverid == serverid &&
			candidate->userid == userid)
		{
			conn = candidate;
			break;
		}
	}
	if (conn != NULL && !conn->invalidated)
		return conn;

	fresh = connection_from_catalog(serverid, userid);
	if (conn == NULL)
		return fresh;
	if (same_options(conn, fresh))
	{
		free_connection(fresh);
		conn->invalidated = false;
		return conn;
	}
	if (conn->pins > 0)
		conn->retired = true;
	else
		free_connection(conn);
	return fresh;
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
 * A key that keeps data beside a Redis key (a lock's fencing counter, an
 * item's buyers) and must hash to its Redis Cluster slot: it reuses the
 * key's hash tag, or makes the whole key its tag.  A key containing '}' but
 * no hash tag cannot be made a tag; its sibling then sits in another slot,
 * which only matters on a Cluster.
 */
char *
redis_sibling_key(const char *rkey, int rkeylen, const char *suffix, int *len)
{
	const char *open = memchr(rkey, '{', rkeylen);
	const char *close = NULL;
	bool		own_tag;
	int			suffixlen = strlen(suffix);
	char	   *sibling = palloc(rkeylen + suffixlen + 4);
	char	   *p = sibling;

	if (open != NULL)
		close = memchr(open + 1, '}', rkeylen - (open + 1 - rkey));
	own_tag = !((close != NULL && close > open + 1) ||
				memchr(rkey, '}', rkeylen) != NULL);

	if (own_tag)
		*p++ = '{';
	memcpy(p, rkey, rkeylen);
	p += rkeylen;
	if (own_tag)
		*p++ = '}';
	*p++ = ':';
	memcpy(p, suffix, suffixlen + 1);
	*len = (p - sibling) + suffixlen;
	return sibling;
}

/*
 * The Redis key named by key argument argno of a SQL function, on the
 * server of redislock.server: that server's key prefix, then the key.  The
 * key is checked (neither NULL nor empty) before anything else is done.
 */
char *
redis_key_arg(FunctionCallInfo fcinfo, int argno, RedisConn **conn_out,
			  int *rkeylen)
{
	text	   *key;
	int			keylen;
	int			prefixlen;
	RedisConn  *conn;
	char	   *rkey;

	require_argument(fcinfo, argno, "Redis key");
	key = PG_GETARG_TEXT_PP(argno);
	keylen = VARSIZE_ANY_EXHDR(key);
	if (keylen == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("Redis key must not be empty")));

	conn = redis_conn_current();
	prefixlen = strlen(conn->key_prefix);
	rkey = palloc(prefixlen + keylen + 1);
	memcpy(rkey, conn->key_prefix, prefixlen);
	memcpy(rkey + prefixlen, VARDATA_ANY(key), keylen);
	rkey[prefixlen + keylen] = '\0';

	*conn_out = conn;
	*rkeylen = prefixlen + keylen;
	return rkey;
}

/* The functions are not STRICT, so that a NULL argument is an error */
void
require_argument(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
}
