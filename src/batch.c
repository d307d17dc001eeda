/*-------------------------------------------------------------------------
 *
 * batch.c
 *		The one way calls reach Redis: a set of calls over any number of
 *		nodes, in one round trip against one absolute deadline.
 *
 * Every node involved first gets all of its calls, pipelined; then one
 * wait serves all of them and replies are taken as they arrive, so a set of
 * calls costs the slowest node's round trip rather than the sum.  Scripts
 * run by EVALSHA; those that Redis answers NOSCRIPT (it restarted, failed
 * over or was told SCRIPT FLUSH) were not run, and are loaded and run again
 * in one more round trip.
 *
 * A call whose reply does not come in time has an unknown outcome and is
 * never sent again.  The connection stays open: the replies still on their
 * way are read and dropped before the next call's, so nothing stale is ever
 * taken for an answer, and whatever is sent next runs after them in Redis.
 * That also holds when an ERROR (a cancel, say) ends a call between sending
 * and reading.  A connection is closed when the stream itself fails, and
 * when Redis says it cannot serve (READONLY and the like), so that the next
 * call connects afresh.
 *
 * Transaction ends run under one deadline for the whole end, however many
 * savepoint levels it unwinds, and a node that failed during an end is left
 * alone for the rest of it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "access/xact.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "redislock.h"

/* A connection quiet for this long is checked before use (microseconds) */
#define IDLE_CHECK_USEC		1000

/* Why a node's replies stopped coming */
typedef enum RunFailure
{
	RUN_OK,
	RUN_SKIPPED,				/* the node failed earlier in this end */
	RUN_NOT_CONNECTED,			/* reported when connecting */
	RUN_TIMED_OUT,
	RUN_GIVEN_UP,				/* termination requested during an end */
	RUN_IO_ERROR,
	RUN_CLOSED,
	RUN_PROTOCOL_ERROR
} RunFailure;

/* The calls of one run that go to one node, in the order they are sent */
typedef struct NodeRun
{
	RedisConn  *conn;
	RedisNode  *node;
	RedisCall **calls;
	int			ncalls;
	int			nreplied;
	RunFailure	failure;
	int			failure_errno;
	bool		close_after;	/* Redis said it cannot serve */
} NodeRun;

/*
 * The transaction end in progress, if any: the callbacks of one statement
 * (a ROLLBACK unwinding savepoints, a COMMIT and what follows) share its
 * deadline until a SQL function talks to Redis again.
 */
static struct
{
	bool		active;
	uint64		id;
	TimestampTz statement_start;
	RedisDeadline deadline;
} current_end;

static void report_failure(const NodeRun *run, RedisDeadline deadline,
						   int elevel);

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
static bool
is_unavailable_reply(const RedisCall *call)
{
	return redis_reply_is_error(call, "READONLY") ||
		redis_reply_is_error(call, "MASTERDOWN") ||
		redis_reply_is_error(call, "LOADING") ||
		redis_reply_is_error(call, "CLUSTERDOWN");
}

/* The SQLSTATE a PostgreSQL user would expect for a Redis error reply */
static int
error_reply_sqlstate(const RedisCall *call)
{
	if (redis_reply_is_error(call, "NOPERM"))
		return ERRCODE_INSUFFICIENT_PRIVILEGE;
	if (redis_reply_is_error(call, "NOAUTH"))
		return ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION;
	if (redis_reply_is_error(call, "WRONGPASS"))
		return ERRCODE_INVALID_PASSWORD;
	if (is_unavailable_reply(call))
		return ERRCODE_CONNECTION_FAILURE;
	if (redis_reply_is_error(call, "OOM"))
		return ERRCODE_OUT_OF_MEMORY;
	if (redis_reply_is_error(call, "WRONGTYPE"))
		return ERRCODE_WRONG_OBJECT_TYPE;
	if (redis_reply_is_error(call, "BUSY"))
		return ERRCODE_OBJECT_IN_USE;
	return ERRCODE_EXTERNAL_ROUTINE_EXCEPTION;
}

/* A hint for the error replies that have an obvious remedy */
static int
error_reply_hint(const RedisCall *call)
{
	if (redis_reply_is_error(call, "NOAUTH"))
		return errhint("Give the password in a user mapping: CREATE USER MAPPING FOR CURRENT_USER SERVER %s OPTIONS (password '...').",
					   quote_identifier(redislock_server_name));
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
				(errcode(error_reply_sqlstate(call)),
				 errmsg("Redis command on key \"%s\" failed with %.*s",
						key, (int) strcspn(call->str, " "), call->str),
				 errdetail("Redis server at %s answered: %s",
						   call->conn->node.endpoint, call->str),
				 error_reply_hint(call)));
	else
		ereport(elevel,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("unexpected Redis reply of type %d for key \"%s\"",
						call->reply_type, key),
				 errdetail("The command ran at Redis server %s.",
						   call->conn->node.endpoint)));
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

/* Keep what the caller needs of a reply, then let hiredis free it */
static void
copy_reply(RedisCall *call, redisReply *reply)
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
	else if (reply->type == REDIS_REPLY_ARRAY)
	{
		call->elements = palloc(sizeof(char *) *
								Max(count_array_strings(reply), 1));
		copy_array_strings(call, reply);
	}
	freeReplyObject(reply);
}

static void
fail_run(NodeRun *run, RunFailure failure, int saved_errno)
{
	run->failure = failure;
	run->failure_errno = saved_errno;
}

static bool
run_done(const NodeRun *run)
{
	return run->failure != RUN_OK ||
		(run->nreplied == run->ncalls && run->node->deferred == 0);
}

/*
 * Take the replies that have arrived: first those of earlier calls that
 * nobody waits for any more, then ours, in the order the calls were sent.
 */
static void
take_replies(NodeRun *run)
{
	RedisNode  *node = run->node;
	int			nreplied = run->nreplied;

	while (!run_done(run))
	{
		redisReply *reply;

		if (!node_next_reply(node, &reply))
		{
			fail_run(run, RUN_PROTOCOL_ERROR, 0);
			break;
		}
		if (reply == NULL)
			break;
		node->awaiting--;
		if (node->deferred > 0)
		{
			node->deferred--;
			freeReplyObject(reply);
			continue;
		}
		copy_reply(run->calls[run->nreplied], reply);
		if (is_unavailable_reply(run->calls[run->nreplied]))
			run->close_after = true;
		run->nreplied++;
	}
	if (run->nreplied > nreplied)
		node->last_reply = GetCurrentTimestamp();
}

/* Write what is pending and read what has arrived on a run's node */
static void
advance_run(NodeRun *run)
{
	bool		closed;

	if (!node_flush(run->node))
	{
		fail_run(run, RUN_IO_ERROR, errno);
		return;
	}
	if (!node_receive(run->node, &closed))
	{
		int			saved_errno = errno;

		/* replies that came before the close still count */
		take_replies(run);
		if (!run_done(run))
			fail_run(run, closed ? RUN_CLOSED : RUN_IO_ERROR, saved_errno);
		return;
	}
	take_replies(run);
}

/*
 * Wait for the replies of every run until all have come or the deadline
 * has passed, serving all nodes in one wait.
 */
static void
await_replies(NodeRun *runs, int nruns, TimestampTz deadline, int elevel)
{
	RedisNode  *waiting_nodes[8];
	RedisNode **waiting = waiting_nodes;
	int			i;

	if (nruns > lengthof(waiting_nodes))
		waiting = palloc(sizeof(RedisNode *) * nruns);

	for (i = 0; i < nruns; i++)
		if (runs[i].failure == RUN_OK)
			take_replies(&runs[i]);

	for (;;)
	{
		int			nwaiting = 0;
		int			nready;

		for (i = 0; i < nruns; i++)
			if (!run_done(&runs[i]))
				waiting[nwaiting++] = runs[i].node;
		if (nwaiting == 0)
			break;

		nready = node_wait(waiting, nwaiting, deadline, elevel);
		for (i = 0; i < nruns; i++)
		{
			if (run_done(&runs[i]))
				continue;
			if (nready > 0)
				advance_run(&runs[i]);
			else
				fail_run(&runs[i],
						 nready == 0 ? RUN_TIMED_OUT : RUN_GIVEN_UP, 0);
		}
	}
	if (waiting != waiting_nodes)
		pfree(waiting);
}

/* Queue a run's calls behind anything still pending, and start writing */
static void
send_run(NodeRun *run)
{
	RedisNode  *node = run->node;
	int			i;

	node->checked = false;
	node->deferred = node->awaiting;
	for (i = 0; i < run->ncalls; i++)
	{
		resp_append_call(&node->out, run->calls[i]);
		node->awaiting++;
	}
	if (!node_flush(node))
		fail_run(run, RUN_IO_ERROR, errno);
}

/*
 * Authenticate and select the database, pipelined in one round trip under
 * the connect deadline.  Returns false (after reporting at elevel and
 * closing the connection) when that fails or Redis refuses.
 */
static bool
handshake(RedisConn *conn, RedisDeadline deadline, int elevel)
{
	RedisCall	calls[2];
	RedisCall  *pcalls[2];
	RedisCall  *auth = NULL;
	NodeRun		run = {0};
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
		redis_call_init(&calls[ncalls], conn, NULL);
		redis_call_arg(&calls[ncalls], "SELECT", 6);
		redis_call_int_arg(&calls[ncalls], conn->database);
		ncalls++;
	}
	if (ncalls == 0)
		return true;

	for (i = 0; i < ncalls; i++)
		pcalls[i] = &calls[i];
	run.conn = conn;
	run.node = &conn->node;
	run.calls = pcalls;
	run.ncalls = ncalls;
	send_run(&run);
	if (run.failure == RUN_OK)
		await_replies(&run, 1, deadline.at, elevel);

	if (run.failure != RUN_OK)
	{
		node_disconnect(&conn->node);
		if (run.failure == RUN_TIMED_OUT)
			ereport(elevel,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("could not connect to Redis server at %s: authentication did not finish within %d ms",
							conn->node.endpoint, deadline.ms),
					 errhint("Raise redislock.connect_timeout if Redis is only slow.")));
		else
			report_failure(&run, deadline, elevel);
		return false;
	}

	for (i = 0; i < ncalls; i++)
	{
		if (calls[i].reply_type != REDIS_REPLY_ERROR)
			continue;
		node_disconnect(&conn->node);
		if (&calls[i] == auth)
			ereport(elevel,
					(errcode(ERRCODE_INVALID_PASSWORD),
					 errmsg("Redis server at %s refused authentication",
							conn->node.endpoint),
					 errdetail("Redis answered: %s", calls[i].str),
					 errhint("Check the username and password options of the user mapping.")));
		else
			ereport(elevel,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("Redis server at %s refused to select database %d",
							conn->node.endpoint, conn->database),
					 errdetail("Redis answered: %s", calls[i].str)));
		return false;
	}
	return true;
}

/*
 * Read and drop the replies that nobody waits for any more and that have
 * arrived by now (those of clean-up sent after commit, mostly), so that an
 * idle connection can be checked.  A connection whose stream fails is
 * closed: only clean-up replies were on it.
 */
static void
drop_arrived_replies(RedisNode *node)
{
	redisReply *reply;
	bool		closed;

	if (node->awaiting == 0)
		return;
	if (!node_receive(node, &closed))
	{
		node_disconnect(node);
		return;
	}
	while (node->awaiting > 0)
	{
		if (!node_next_reply(node, &reply))
		{
			node_disconnect(node);
			return;
		}
		if (reply == NULL)
			return;
		node->awaiting--;
		freeReplyObject(reply);
	}
}

/*
 * Make a run's node ready to take calls.  A connection the peer closed
 * while idle is opened again without a word, since nothing of ours was on
 * it.  The check costs a system call, so a connection that answered within
 * the last IDLE_CHECK_USEC is taken as alive.  Connecting and
 * authenticating are bounded by connect_timeout.
 */
static bool
prepare_node(NodeRun *run, RedisDeadline deadline, int elevel)
{
	RedisNode  *node = run->node;
	RedisDeadline connect_deadline;

	if (node->checked)
		return true;
	if (node_is_connected(node) &&
		GetCurrentTimestamp() - node->last_reply >= IDLE_CHECK_USEC)
	{
		drop_arrived_replies(node);
		if (node_is_connected(node) && node_peer_closed(node))
			node_disconnect(node);
	}
	node->checked = node_is_connected(node);
	if (node->checked)
		return true;

	connect_deadline.ms = redislock_connect_timeout;
	connect_deadline.lock_timeout = false;
	connect_deadline.at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													  redislock_connect_timeout);
	if (deadline.at < connect_deadline.at)
		connect_deadline = deadline;
	if (!node_connect(node, connect_deadline.at, elevel) ||
		!handshake(run->conn, connect_deadline, elevel))
	{
		fail_run(run, RUN_NOT_CONNECTED, 0);
		return false;
	}
	node->checked = true;
	return true;
}

/*
 * Connect now, raising an ERROR on failure.  Callers use it before a
 * command whose failure after sending leaves state to clean up, so that a
 * Redis that cannot even be reached is told apart from an unknown outcome.
 */
void
redis_connect(RedisConn *conn)
{
	NodeRun		run = {0};

	run.conn = conn;
	run.node = &conn->node;
	(void) prepare_node(&run, redis_command_deadline(), ERROR);
}

/* Report why a node's replies did not all come */
static void
report_failure(const NodeRun *run, RedisDeadline deadline, int elevel)
{
	const char *endpoint = run->node->endpoint;

	switch (run->failure)
	{
		case RUN_OK:
		case RUN_SKIPPED:
		case RUN_NOT_CONNECTED:
			break;
		case RUN_TIMED_OUT:
			if (deadline.lock_timeout)
				ereport(elevel,
						(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
						 errmsg("canceling statement due to lock timeout"),
						 errdetail("Waited %d ms for Redis lock \"%.*s\" at %s, which did not answer in time; the outcome of the last attempt is unknown.",
								   deadline.ms, (int) run->calls[0]->argvlen[0],
								   run->calls[0]->argv[0], endpoint)));
			ereport(elevel,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("Redis server at %s did not answer within %d ms",
							endpoint, deadline.ms),
					 errdetail("The outcome of the command is unknown; it was not sent again."),
					 errhint("Raise redislock.command_timeout if Redis is only slow.")));
			break;
		case RUN_GIVEN_UP:
			ereport(elevel,
					(errcode(ERRCODE_ADMIN_SHUTDOWN),
					 errmsg("stopped waiting for Redis server at %s because the backend is terminating",
							endpoint),
					 errdetail("The outcome of the command is unknown; Redis lock leases end what was left.")));
			break;
		case RUN_CLOSED:
			ereport(elevel,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("lost connection to Redis server at %s: the server closed the connection",
							endpoint),
					 errdetail("The outcome of the command is unknown; it was not sent again.")));
			break;
		case RUN_IO_ERROR:
			ereport(elevel,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("lost connection to Redis server at %s: %s",
							endpoint, strerror(run->failure_errno)),
					 errdetail("The outcome of the command is unknown; it was not sent again.")));
			break;
		case RUN_PROTOCOL_ERROR:
			ereport(elevel,
					(errcode(ERRCODE_PROTOCOL_VIOLATION),
					 errmsg("invalid reply from Redis server at %s", endpoint),
					 errdetail("The outcome of the command is unknown; it was not sent again.")));
			break;
	}
}

/*
 * After a run: close the connections that failed or that Redis said cannot
 * serve, remember the nodes that failed during an end, and report.
 * A node that merely timed out keeps its connection: its late replies are
 * dropped at its next use, and what is sent next runs after them.
 */
static bool
conclude_runs(NodeRun *runs, int nruns, RedisDeadline deadline, int elevel)
{
	bool		ok = true;
	int			i;

	for (i = 0; i < nruns; i++)
	{
		NodeRun    *run = &runs[i];

		if (run->failure == RUN_IO_ERROR || run->failure == RUN_CLOSED ||
			run->failure == RUN_PROTOCOL_ERROR || run->close_after)
			node_disconnect(run->node);
		if (run->failure == RUN_OK)
			continue;
		ok = false;
		if (elevel < ERROR && current_end.active)
			run->node->failed_end = current_end.id;
		if (run->failure == RUN_GIVEN_UP)
			current_end.deadline.at = 0;
	}
	for (i = 0; i < nruns; i++)
		report_failure(&runs[i], deadline, elevel);
	return ok;
}

/*
 * Group calls by node, keeping their order within each node.  The runs and
 * the call pointers come from one allocation.
 */
static NodeRun *
group_calls(RedisCall *calls, int ncalls, int *nruns_out)
{
	NodeRun    *runs = palloc0(sizeof(NodeRun) * ncalls +
							   sizeof(RedisCall *) * ncalls);
	RedisCall **slots = (RedisCall **) (runs + ncalls);
	int			nruns = 0;
	int			i;
	int			r;

	for (i = 0; i < ncalls; i++)
	{
		for (r = 0; r < nruns; r++)
			if (runs[r].conn == calls[i].conn)
				break;
		if (r == nruns)
		{
			runs[r].conn = calls[i].conn;
			runs[r].node = &calls[i].conn->node;
			nruns++;
		}
		runs[r].ncalls++;
	}
	for (r = 0; r < nruns; r++)
	{
		runs[r].calls = slots;
		slots += runs[r].ncalls;
		runs[r].ncalls = 0;
	}
	for (i = 0; i < ncalls; i++)
	{
		for (r = 0; runs[r].conn != calls[i].conn; r++)
			;
		runs[r].calls[runs[r].ncalls++] = &calls[i];
	}
	*nruns_out = nruns;
	return runs;
}

static bool
is_noscript(const RedisCall *call)
{
	return call->script != NULL && redis_reply_is_error(call, "NOSCRIPT");
}

/*
 * Queue SCRIPT LOAD, once per script, for the calls of run that Redis
 * answered NOSCRIPT.  The loads come first in rerun's calls; the script a
 * load is for is its origin.
 */
static void
queue_script_loads(NodeRun *rerun, const NodeRun *run)
{
	int			i;
	int			j;

	for (i = 0; i < run->ncalls; i++)
	{
		const RedisScript *script = run->calls[i]->script;
		RedisCall  *load;

		if (!is_noscript(run->calls[i]))
			continue;
		for (j = 0; j < rerun->ncalls; j++)
			if (rerun->calls[j]->origin == script)
				break;
		if (j < rerun->ncalls)
			continue;
		load = palloc(sizeof(RedisCall));
		redis_call_init(load, run->conn, NULL);
		load->origin = (void *) script;
		resp_append_script_load(&rerun->node->out, script);
		rerun->node->awaiting++;
		rerun->calls[rerun->ncalls++] = load;
	}
}

/*
 * Calls answered NOSCRIPT were not run, so they are safe to send again:
 * load each missing script, then run those calls again, in one more round
 * trip for all nodes.  A script that cannot be loaded (an ACL user without
 * script|load, say) is reported as what it is, not as NOSCRIPT.
 */
static bool
rerun_noscript_calls(NodeRun *runs, int nruns, RedisDeadline deadline,
					 int elevel)
{
	NodeRun    *reruns = NULL;
	int			nreruns = 0;
	bool		ok;
	int			r;
	int			i;

	for (r = 0; r < nruns; r++)
	{
		NodeRun    *rerun;

		for (i = 0; i < runs[r].ncalls; i++)
			if (is_noscript(runs[r].calls[i]))
				break;
		if (runs[r].failure != RUN_OK || i == runs[r].ncalls)
			continue;
		if (reruns == NULL)
			reruns = palloc0(sizeof(NodeRun) * nruns);
		rerun = &reruns[nreruns++];
		rerun->conn = runs[r].conn;
		rerun->node = runs[r].node;
		rerun->calls = palloc(sizeof(RedisCall *) * runs[r].ncalls * 2);
		queue_script_loads(rerun, &runs[r]);
		for (i = 0; i < runs[r].ncalls; i++)
		{
			if (!is_noscript(runs[r].calls[i]))
				continue;
			rerun->calls[rerun->ncalls++] = runs[r].calls[i];
			resp_append_call(&rerun->node->out, runs[r].calls[i]);
			rerun->node->awaiting++;
		}
		rerun->node->deferred = rerun->node->awaiting - rerun->ncalls;
		if (!node_flush(rerun->node))
			fail_run(rerun, RUN_IO_ERROR, errno);
	}
	if (nreruns == 0)
		return true;

	await_replies(reruns, nreruns, deadline.at, elevel);
	ok = conclude_runs(reruns, nreruns, deadline, elevel);
	for (r = 0; r < nreruns; r++)
	{
		for (i = 0; i < reruns[r].nreplied; i++)
		{
			RedisCall  *load = reruns[r].calls[i];

			if (load->script != NULL || load->reply_type != REDIS_REPLY_ERROR)
				continue;
			ok = false;
			ereport(elevel,
					(errcode(error_reply_sqlstate(load)),
					 errmsg("could not load Redis script \"%s\": %.*s",
							((const RedisScript *) load->origin)->name,
							(int) strcspn(load->str, " "), load->str),
					 errdetail("Redis server at %s answered: %s",
							   reruns[r].node->endpoint, load->str),
					 error_reply_hint(load)));
		}
		/* calls that could not be run again have no reply */
		for (i = 0; i < reruns[r].ncalls; i++)
			if (is_noscript(reruns[r].calls[i]) || i >= reruns[r].nreplied)
				reruns[r].calls[i]->reply_type = 0;
	}
	return ok;
}

/*
 * Run calls on their nodes, all in one round trip (two when scripts must be
 * loaded), within the deadline.  Error replies are left for the caller to
 * interpret.  Failures to reach a node are reported at elevel; when elevel
 * is below ERROR the run goes on with the other nodes and returns false,
 * and the calls that got no reply have reply_type 0.  A run for a SQL
 * function (elevel ERROR) closes the transaction end in progress, if any:
 * the next end gets a deadline of its own.
 */
bool
redis_run_until(RedisCall *calls, int ncalls, RedisDeadline deadline,
				int elevel)
{
	NodeRun    *runs;
	int			nruns;
	bool		ok;
	int			i;

	if (ncalls == 0)
		return true;
	if (elevel >= ERROR)
		current_end.active = false;
	for (i = 0; i < ncalls; i++)
		calls[i].reply_type = 0;

	runs = group_calls(calls, ncalls, &nruns);
	for (i = 0; i < nruns; i++)
	{
		if (elevel < ERROR && current_end.active &&
			runs[i].node->failed_end == current_end.id)
			fail_run(&runs[i], RUN_SKIPPED, 0);
		else if (prepare_node(&runs[i], deadline, elevel))
			send_run(&runs[i]);
	}
	await_replies(runs, nruns, deadline.at, elevel);
	ok = conclude_runs(runs, nruns, deadline, elevel);
	if (!rerun_noscript_calls(runs, nruns, deadline, elevel))
		ok = false;
	pfree(runs);
	return ok;
}

/* The deadline of one SQL-level operation */
RedisDeadline
redis_command_deadline(void)
{
	RedisDeadline deadline;

	deadline.ms = redislock_command_timeout;
	deadline.at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											  redislock_command_timeout);
	deadline.lock_timeout = false;
	return deadline;
}

/* Run calls for a SQL function: any failure is an ERROR */
void
redis_run(RedisCall *calls, int ncalls)
{
	(void) redis_run_until(calls, ncalls, redis_command_deadline(), ERROR);
}

/*
 * The deadline of the transaction end under way, started now if none is:
 * command_timeout, capped by the administrator's end_timeout_limit.
 */
RedisDeadline
redis_end_deadline(void)
{
	TimestampTz statement_start = GetCurrentStatementStartTimestamp();

	if (!current_end.active || current_end.statement_start != statement_start)
	{
		int			ms = Min(redislock_command_timeout,
							 redislock_end_timeout_limit);

		current_end.active = true;
		current_end.id++;
		current_end.statement_start = statement_start;
		current_end.deadline.ms = ms;
		current_end.deadline.lock_timeout = false;
		current_end.deadline.at =
			TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);
	}
	return current_end.deadline;
}

/* The top-level transaction has ended: the next end starts afresh */
void
redis_end_finish(void)
{
	current_end.active = false;
}

/*
 * Send calls whose replies nobody waits for (clean-up after commit): they
 * cost no round trip now, and their replies are dropped when the node is
 * next used.  Nodes that are not connected, or failed during this end, are
 * left alone; what the calls would clean up is found again later.
 */
void
redis_send_deferred(RedisCall *calls, int ncalls)
{
	int			i;

	for (i = 0; i < ncalls; i++)
	{
		RedisNode  *node = &calls[i].conn->node;

		if (!node_is_connected(node) ||
			(current_end.active && node->failed_end == current_end.id))
			continue;
		resp_append_call(&node->out, &calls[i]);
		node->awaiting++;
		if (!node_flush(node))
			node_disconnect(node);
	}
}
