/*-------------------------------------------------------------------------
 *
 * call.c
 *		Redis calls: building them, keeping what their replies say, and
 *		what a Redis error reply means to a PostgreSQL user.
 *
 * A call is a command or a script call with binary-safe arguments (the
 * caller keeps them alive until the call has run).  Its reply is copied out
 * of hiredis' reader as soon as it arrives, so that the reader's memory is
 * freed at once and the caller reads plain strings.  Error replies map to
 * the SQLSTATEs a PostgreSQL user would expect: NOPERM is a permission
 * error, OOM an out-of-memory error, READONLY and the like a connection
 * failure, and so on.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "utils/builtins.h"

#include "io/io.h"

void
redis_call_init(RedisCall *call, RedisConn *conn, const RedisScript *script)
{
	memset(call, 0, sizeof(RedisCall));
	call->conn = conn;
	call->script = script;
	call->slot = -1;
}

/*
 * Add an argument; the caller keeps arg alive until the call has run.
 * Those after the first REDIS_CALL_MAX_ARGS, which only a script call on
 * many keys has, go into arrays that grow in the current memory context.
 */
void
redis_call_arg(RedisCall *call, const char *arg, size_t len)
{
	int			more = call->argc - REDIS_CALL_MAX_ARGS;

	if (more < 0)
	{
		call->argv[call->argc] = arg;
		call->argvlen[call->argc++] = len;
		return;
	}
	if (more == call->maxargs_more)
	{
		call->maxargs_more = Max(call->maxargs_more * 2, 16);
		if (call->argv_more == NULL)
		{
			call->argv_more = palloc(sizeof(char *) * call->maxargs_more);
			call->argvlen_more = palloc(sizeof(size_t) * call->maxargs_more);
		}
		else
		{
			call->argv_more = repalloc(call->argv_more,
									   sizeof(char *) * call->maxargs_more);
			call->argvlen_more = repalloc(call->argvlen_more,
										  sizeof(size_t) * call->maxargs_more);
		}
	}
	call->argv_more[more] = arg;
	call->argvlen_more[more] = len;
	call->argc++;
}

/*
 * Add an integer argument.  It is kept in the call and formatted only when
 * the call is sent, which spares an allocation per command.
 */
void
redis_call_int_arg(RedisCall *call, int64 value)
{
	Assert(call->argc < REDIS_CALL_MAX_ARGS);
	call->intargs[call->argc] = value;
	redis_call_arg(call, NULL, 0);
}

/* Run the call on node, whatever key it names (it may name none) */
void
redis_call_on_node(RedisCall *call, RedisNode *node)
{
	call->node = node;
	call->node_given = true;
}

/*
 * Make call a call on several keys whose answers are those of nparts parts
 * (see RedisCall); returns the parts, zeroed but for their server and
 * script, for the caller to name what each is for (origin).
 */
RedisCall *
redis_call_add_parts(RedisCall *call, int nparts)
{
	int			i;

	call->parts = palloc0(sizeof(RedisCall) * nparts);
	call->nparts = nparts;
	for (i = 0; i < nparts; i++)
	{
		call->parts[i].conn = call->conn;
		call->parts[i].script = call->script;
		call->parts[i].slot = call->slot;
	}
	return call->parts;
}

/*
 * After a run, give the parts of a call on several keys what they need
 * for their messages (the node), and, when the call's reply was not the
 * array of their answers (an error reply, one answer for all, or none),
 * that reply as each part's own.
 */
void
redis_call_spread_reply(RedisCall *call)
{
	int			i;

	for (i = 0; i < call->nparts; i++)
	{
		RedisCall  *part = &call->parts[i];

		part->node = call->node;
		if (call->reply_type == REDIS_REPLY_ARRAY)
			continue;
		part->reply_type = call->reply_type;
		part->integer = call->integer;
		part->str = call->str;
		part->len = call->len;
	}
}

/* The HDEL of field (fieldlen bytes) from the hash key on conn's server */
void
redis_call_hdel(RedisCall *call, RedisConn *conn, const char *key,
				int keylen, const char *field, int fieldlen)
{
	redis_call_init(call, conn, NULL);
	redis_call_arg(call, "HDEL", 4);
	redis_call_arg(call, key, keylen);
	redis_call_arg(call, field, fieldlen);
}

/*
 * Make wait a WAIT for the replicas that the server's min_replicas option
 * asks for, run right after the call it follows, on the same node, within
 * replica_timeout.
 */
void
redis_call_wait_replicas(RedisCall *wait, RedisCall *after)
{
	char	   *replicas = psprintf("%d", after->conn->min_replicas);
	char	   *timeout = psprintf("%d", after->conn->replica_timeout);

	redis_call_init(wait, after->conn, NULL);
	wait->follows = after;
	redis_call_arg(wait, "WAIT", 4);
	redis_call_arg(wait, replicas, strlen(replicas));
	redis_call_arg(wait, timeout, strlen(timeout));
}

/* Did enough replicas acknowledge the writes before wait? */
bool
redis_replicas_acknowledged(const RedisCall *wait)
{
	return wait->reply_type == REDIS_REPLY_INTEGER &&
		wait->integer >= wait->conn->min_replicas;
}

/*
 * Report a write to key that too few replicas acknowledged, and that the
 * caller has undone (or leaves to the transaction's abort) as undone says.
 * A server that refuses WAIT (some managed services do) cannot honour
 * min_replicas at all, which is said as such.
 */
void
redis_report_replicas(const RedisCall *wait, const char *key,
					  const char *undone)
{
	if (wait->reply_type == REDIS_REPLY_ERROR)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("Redis server \"%s\" refused WAIT, which option \"min_replicas\" needs",
						wait->conn->servername),
				 errdetail("Redis at %s answered: %s", wait->node->endpoint,
						   wait->str),
				 errhint("Set min_replicas to 0 for a server without WAIT.")));
	if (wait->reply_type != REDIS_REPLY_INTEGER)
		redis_unexpected_reply(wait, key, ERROR);
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("only %lld of %d required replicas of Redis server \"%s\" acknowledged the write of key \"%s\"",
					wait->integer, wait->conn->min_replicas,
					wait->conn->servername, key),
			 errdetail("The replicas of the master at %s did not answer within replica_timeout (%d ms); %s.",
					   wait->node->endpoint, wait->conn->replica_timeout,
					   undone),
			 errhint("A lock or decrement that only the master has would be lost if the master failed.")));
}

/* A new call slot at the end of the batch */
RedisCall *
redis_batch_add(RedisBatch *batch)
{
	if (batch->ncalls == batch->maxcalls)
	{
		batch->maxcalls = Max(batch->maxcalls * 2, 16);
		if (batch->calls == NULL)
			batch->calls = palloc(sizeof(RedisCall) * batch->maxcalls);
		else
			batch->calls = repalloc(batch->calls,
									sizeof(RedisCall) * batch->maxcalls);
	}
	return &batch->calls[batch->ncalls++];
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

/*
 * Error replies that say this node cannot serve now: a replica, a master
 * cut off from its replicas, a node loading its data or a cluster that is
 * down.  The connection is closed so that the next call starts afresh.
 */
bool
redis_reply_is_unavailable(const RedisCall *call)
{
	return redis_reply_is_error(call, "READONLY") ||
		redis_reply_is_error(call, "MASTERDOWN") ||
		redis_reply_is_error(call, "LOADING") ||
		redis_reply_is_error(call, "CLUSTERDOWN");
}

/*
 * Replies of a cluster that say the call was not run here and may be sent
 * again: it is, while the deadline and the number of rounds allow.
 */
static bool
is_not_run_reply(const RedisCall *call)
{
	return redis_reply_is_error(call, "MOVED") ||
		redis_reply_is_error(call, "ASK") ||
		redis_reply_is_error(call, "TRYAGAIN");
}

/*
 * Did the server refuse a script because it runs none?  Valkey 9.1 runs Lua
 * as a module that may be left out or unloaded ("Could not find scripting
 * engine"), and an operator may rename EVALSHA away ("unknown command").
 */
static bool
is_no_scripting_reply(const RedisCall *call)
{
	static const char *const refusals[] = {
		"ERR Could not find scripting engine",
		"ERR unknown command 'EVALSHA'",
		"ERR unknown command 'EVAL'",
		"ERR unknown command 'SCRIPT'",
	};
	int			i;

	if (!redis_reply_is_error(call, "ERR"))
		return false;
	for (i = 0; i < lengthof(refusals); i++)
		if (pg_strncasecmp(call->str, refusals[i], strlen(refusals[i])) == 0)
			return true;
	return false;
}

/* The SQLSTATE a PostgreSQL user would expect for a Redis error reply */
int
redis_error_sqlstate(const RedisCall *call)
{
	static const struct
	{
		const char *code;
		int			sqlstate;
	}			codes[] = {
		{"NOPERM", ERRCODE_INSUFFICIENT_PRIVILEGE},
		{"NOAUTH", ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION},
		{"WRONGPASS", ERRCODE_INVALID_PASSWORD},
		{"OOM", ERRCODE_OUT_OF_MEMORY},
		{"WRONGTYPE", ERRCODE_WRONG_OBJECT_TYPE},
		{"BUSY", ERRCODE_OBJECT_IN_USE},
	};
	int			i;

	if (redis_reply_is_unavailable(call) || is_not_run_reply(call))
		return ERRCODE_CONNECTION_FAILURE;
	if (is_no_scripting_reply(call))
		return ERRCODE_FEATURE_NOT_SUPPORTED;
	for (i = 0; i < lengthof(codes); i++)
		if (redis_reply_is_error(call, codes[i].code))
			return codes[i].sqlstate;
	return ERRCODE_EXTERNAL_ROUTINE_EXCEPTION;
}

/* A hint for the error replies that have an obvious remedy */
int
redis_error_hint(const RedisCall *call)
{
	if (redis_reply_is_error(call, "NOAUTH"))
		return errhint("Give the password in a user mapping: CREATE USER MAPPING FOR CURRENT_USER SERVER %s OPTIONS (password '...').",
					   quote_identifier(call->conn->servername));
	if (is_no_scripting_reply(call))
		return errhint("redislock runs its operations as Lua scripts (EVALSHA, SCRIPT LOAD): the server at %s must run Lua scripts (on Valkey 9.1 and later, with its Lua engine loaded).",
					   call->node->endpoint);
	if (redis_reply_is_error(call, "NOPERM") && call->script != NULL)
		return errhint("The Redis ACL user of the user mapping may not run scripts: redislock needs EVALSHA and SCRIPT LOAD (ACL category @scripting) and the commands its scripts run.");
	if (redis_reply_is_error(call, "NOPERM"))
		return errhint("The Redis ACL user of the user mapping lacks a permission this call needs.");
	if (redis_reply_is_error(call, "BUSY"))
		return errhint("Redis is running a long script; it answers again once the script ends or SCRIPT KILL stops it.");
	return 0;
}

/*
 * Report a reply that the caller did not expect: an error reply, in the
 * SQLSTATE that matches its code and with Redis' own words in the DETAIL,
 * or a reply of an unexpected type.
 */
void
redis_unexpected_reply(const RedisCall *call, const char *key, int elevel)
{
	if (call->reply_type == REDIS_REPLY_ERROR)
		ereport(elevel,
				(errcode(redis_error_sqlstate(call)),
				 errmsg("Redis command on key \"%s\" of server \"%s\" failed with %.*s",
						key, call->conn->servername,
						(int) strcspn(call->str, " "), call->str),
				 errdetail("Redis at %s answered: %s",
						   call->node->endpoint, call->str),
				 redis_error_hint(call)));
	else
		ereport(elevel,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("unexpected Redis reply of type %d for key \"%s\" of server \"%s\"",
						call->reply_type, key, call->conn->servername),
				 errdetail("The command ran at %s.", call->node->endpoint)));
}

/* The number of strings in an array reply, nested arrays inlined */
static int
count_array_strings(const redisReply *reply)
{
	int			n = 0;
	size_t		i;

	for (i = 0; i < reply->elements; i++)
		n += reply->element[i]->type == REDIS_REPLY_ARRAY ?
			count_array_strings(reply->element[i]) : 1;
	return n;
}

/* Copy the strings (and integers, as text) of an array reply, in order */
static void
copy_array_strings(RedisCall *call, const redisReply *reply)
{
	size_t		i;

	for (i = 0; i < reply->elements; i++)
	{
		const redisReply *element = reply->element[i];

		if (element->type == REDIS_REPLY_ARRAY)
			copy_array_strings(call, element);
		else if (element->type == REDIS_REPLY_INTEGER)
			call->elements[call->nelements++] = psprintf("%lld",
														 element->integer);
		else
			call->elements[call->nelements++] =
				element->str ? pnstrdup(element->str, element->len) : NULL;
	}
}

/*
 * Keep what a HELLO reply says the node is, a server's name and version,
 * in TopMemoryContext, and whether it runs without cluster mode: its pairs
 * of names and values come as an array.  An error (a server older than
 * Redis 6, or a user not allowed HELLO) leaves them unknown.
 */
void
redis_note_hello(RedisNode *node, const redisReply *reply)
{
	size_t		i;

	if (reply->type != REDIS_REPLY_ARRAY)
		return;
	for (i = 0; i + 1 < reply->elements; i += 2)
	{
		const redisReply *name = reply->element[i];
		const redisReply *value = reply->element[i + 1];
		char	  **field;

		if (name->type != REDIS_REPLY_STRING || value->type != REDIS_REPLY_STRING)
			continue;
		if (strcmp(name->str, "mode") == 0)
		{
			node->standalone = strcmp(value->str, "standalone") == 0;
			continue;
		}
		if (strcmp(name->str, "server") == 0)
			field = &node->server_name;
		else if (strcmp(name->str, "version") == 0)
			field = &node->server_version;
		else
			continue;
		if (*field != NULL)
			pfree(*field);
		*field = MemoryContextStrdup(TopMemoryContext, value->str);
	}
}

/*
 * Keep the type of a reply, and its integer or string: of a call's own
 * reply, or of one answer of an array reply as a part's
 */
static void
take_scalar_reply(RedisCall *call, const redisReply *reply)
{
	call->reply_type = reply->type;
	call->integer = reply->integer;
	call->str = NULL;
	call->len = 0;
	call->nelements = 0;
	if (reply->type == REDIS_REPLY_STRING ||
		reply->type == REDIS_REPLY_STATUS ||
		reply->type == REDIS_REPLY_ERROR)
	{
		call->str = pnstrdup(reply->str, reply->len);
		call->len = reply->len;
	}
}

/* Keep what the caller needs of a reply, then let hiredis free it */
void
redis_call_take_reply(RedisCall *call, redisReply *reply)
{
	if (call->parse_reply != NULL && reply->type != REDIS_REPLY_ERROR)
	{
		call->parse_reply(call, reply);
		freeReplyObject(reply);
		return;
	}
	if (call->nparts > 0 && reply->type == REDIS_REPLY_ARRAY &&
		reply->elements == (size_t) call->nparts)
	{
		size_t		i;

		for (i = 0; i < reply->elements; i++)
			take_scalar_reply(&call->parts[i], reply->element[i]);
		call->reply_type = REDIS_REPLY_ARRAY;
		call->nelements = 0;
		freeReplyObject(reply);
		return;
	}
	take_scalar_reply(call, reply);
	if (reply->type == REDIS_REPLY_ARRAY)
	{
		call->elements = palloc(sizeof(char *) *
								Max(count_array_strings(reply), 1));
		copy_array_strings(call, reply);
	}
	freeReplyObject(reply);
}
