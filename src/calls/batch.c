/*-------------------------------------------------------------------------
 *
 * batch.c
 *		The one way calls reach Redis: a set of calls over any number of
 *		nodes, in one round trip against one absolute deadline.
 *
 * Every node involved first gets all of its calls, pipelined; then one
 * wait serves all of them and replies are taken as they arrive, so a set of
 * calls costs the slowest node's round trip rather than the sum.  Some
 * answers say that a call was not run, and it is sent again in one more
 * round trip for all such calls: NOSCRIPT (Redis restarted, failed over or
 * was told SCRIPT FLUSH; the script is loaded first), and from a cluster
 * MOVED and ASK (sent where the redirection says, after ASKING for ASK)
 * and TRYAGAIN (a multi-key call during a slot migration, sent again after
 * a short pause while the deadline allows).
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
 * A transaction end runs under a deadline of its own, shared by the ends
 * of one ROLLBACK that unwinds savepoint levels (xact.c says which ends go
 * together), and a node that failed during an end is left alone for the
 * rest of it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "miscadmin.h"

#include "calls/calls.h"
#include "guc.h"
#include "stats.h"

/* A connection quiet for this long is checked before use (microseconds) */
#define IDLE_CHECK_USEC		1000

/*
 * Round trips one set of calls may take for redirections and script loads;
 * TRYAGAIN is retried for as long as the deadline allows.
 */
#define MAX_ROUNDS			8

/* The pause before calls answered TRYAGAIN are sent again (milliseconds) */
#define TRYAGAIN_PAUSE_MS	20

/* Why a node's replies stopped coming */
typedef enum RunFailure
{
	RUN_OK,
	RUN_SKIPPED,				/* the node failed earlier in this end */
	RUN_NOT_CONNECTED,			/* the connect failed */
	RUN_NOT_ACCEPTED,			/* the handshake failed, reported then */
	RUN_REROUTED,				/* not connected; its calls go elsewhere */
	RUN_MOOT,					/* Redlock: decided without its replies */
	RUN_TIMED_OUT,
	RUN_GIVEN_UP,				/* termination requested during an end */
	RUN_NOT_WAITED,				/* an end sent its calls to a stalled node */
	RUN_IO_ERROR,
	RUN_CLOSED,
	RUN_PROTOCOL_ERROR
} RunFailure;

/* The calls of one run that go to one node, in the order they are sent */
typedef struct NodeRun
{
	RedisNode  *node;
	RedisCall **wanted;			/* the caller's calls */
	int			nwanted;
	RedisCall **calls;			/* what is sent: those and their helpers */
	int			ncalls;
	int			nreplied;
	RunFailure	failure;
	int			failure_errno;
	bool		close_after;	/* Redis said it cannot serve */
	bool		subscribes;		/* connects a subscription's connection */
} NodeRun;

static void report_failure(const NodeRun *run, RedisDeadline deadline,
						   int elevel);
static const char *failure_reason(const NodeRun *run, RedisDeadline deadline,
								  int *sqlstate);

static void
fail_run(NodeRun *run, RunFailure failure, int saved_errno)
{
	run->failure = failure;
	run->failure_errno = saved_errno;
}

/*
 * Are the calls of a run that have no reply yet all copies of calls that
 * their quorum decided already?  The run then waits no longer; the
 * replies still due are dropped when the node is next used.
 */
static bool
run_is_moot(const NodeRun *run)
{
	const RedisTopology *topology = run->node->conn->topology;
	int			i;

	if (topology->copy_is_moot == NULL)
		return false;
	for (i = run->nreplied; i < run->ncalls; i++)
		if (!run->calls[i]->helper && !topology->copy_is_moot(run->calls[i]))
			return false;
	return true;
}

static bool
run_done(NodeRun *run)
{
	if (run->failure == RUN_OK && run_is_moot(run) &&
		run->nreplied < run->ncalls)
		run->failure = RUN_MOOT;
	return run->failure != RUN_OK ||
		(run->nreplied == run->ncalls && run->node->deferred == 0);
}

/*
 * Is the reply an error that counts as one?  Those that have the batch
 * send the call again (see send_again) do not.
 */
static bool
is_error_reply(const RedisCall *call)
{
	static const char *const resent[] = {"NOSCRIPT", "MOVED", "ASK",
	"TRYAGAIN", "READONLY"};
	int			i;

	if (call->reply_type != REDIS_REPLY_ERROR)
		return false;
	for (i = 0; i < lengthof(resent); i++)
		if (redis_reply_is_error(call, resent[i]))
			return false;
	return true;
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
		if (node->deferred > 0)
		{
			node->deferred--;
			redis_drop_reply(node, reply);
			continue;
		}
		node->awaiting--;
		redis_call_take_reply(run->calls[run->nreplied], reply);
		if (is_error_reply(run->calls[run->nreplied]))
			redis_count(node->conn, REDIS_STAT_ERRORS, 1);
		if (redis_reply_is_unavailable(run->calls[run->nreplied]))
			run->close_after = true;
		if (node->conn->topology->note_reply != NULL)
			node->conn->topology->note_reply(run->calls[run->nreplied]);
		run->nreplied++;
	}
	if (run->nreplied > nreplied)
	{
		node->last_reply = GetCurrentTimestamp();
		node->stalled = false;
	}
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
	RedisNode  *nodes_here[8];
	NodeRun    *node_runs_here[8];
	bool		waiting_here[8];
	RedisNode **nodes = nodes_here;
	NodeRun   **node_runs = node_runs_here;
	bool	   *waiting = waiting_here;
	int			nnodes = 0;
	int			i;

	if (nruns > lengthof(nodes_here))
	{
		nodes = palloc(sizeof(RedisNode *) * nruns);
		node_runs = palloc(sizeof(NodeRun *) * nruns);
		waiting = palloc(sizeof(bool) * nruns);
	}

	for (i = 0; i < nruns; i++)
	{
		if (runs[i].failure == RUN_OK)
			take_replies(&runs[i]);
		if (run_done(&runs[i]))
			continue;
		nodes[nnodes] = runs[i].node;
		node_runs[nnodes++] = &runs[i];
	}

	for (;;)
	{
		bool		any = false;
		int			nready;

		for (i = 0; i < nnodes; i++)
		{
			waiting[i] = !run_done(node_runs[i]);
			any |= waiting[i];
		}
		if (!any)
			break;

		nready = node_wait(nodes, waiting, nnodes, deadline, elevel);
		for (i = 0; i < nnodes; i++)
		{
			if (!waiting[i])
				continue;
			if (nready > 0)
				advance_run(node_runs[i]);
			else
				fail_run(node_runs[i],
						 nready == 0 ? RUN_TIMED_OUT : RUN_GIVEN_UP, 0);
		}
	}
	if (nodes != nodes_here)
	{
		pfree(nodes);
		pfree(node_runs);
		pfree(waiting);
	}
}

/*
 * A call sent before another one for its sake: SCRIPT LOAD of script, or
 * ASKING when script is NULL.
 */
static RedisCall *
helper_call(const RedisCall *call, const RedisScript *script)
{
	RedisCall  *helper = palloc(sizeof(RedisCall));

	redis_call_init(helper, call->conn, NULL);
	redis_call_on_node(helper, call->node);
	helper->helper = true;
	helper->origin = (void *) script;
	if (script == NULL)
		redis_call_arg(helper, "ASKING", 6);
	return helper;
}

/* Has the run loaded the script already? */
static bool
run_loads_script(const NodeRun *run, const RedisScript *script)
{
	int			i;

	for (i = 0; i < run->ncalls; i++)
		if (run->calls[i]->helper && run->calls[i]->origin == script)
			return true;
	return false;
}

/* Append a call to the run and to its node's pending output */
static void
queue_call(NodeRun *run, RedisCall *call)
{
	RedisNode  *node = run->node;

	if (call->helper && call->origin != NULL)
		resp_append_script_load(&node->out, call->origin);
	else
		resp_append_call(&node->out, call);
	node->awaiting++;
	node->sent++;
	redis_count(node->conn, REDIS_STAT_CALLS, 1);
	run->calls[run->ncalls++] = call;
}

/*
 * Queue a run's calls behind anything still pending, with what is held
 * back for the node ahead of them or inside them, each preceded by what it
 * needs (its script loaded, ASKING), and start writing.
 */
static void
send_run(NodeRun *run)
{
	RedisNode  *node = run->node;
	bool		helpers = false;
	int			i;

	node->checked = false;
	redis_release_held(node, run->wanted, run->nwanted);
	node->deferred = node->awaiting;
	redis_count(node->conn, REDIS_STAT_ROUND_TRIPS, 1);
	for (i = 0; i < run->nwanted; i++)
		helpers |= run->wanted[i]->load_script || run->wanted[i]->asking;
	/* most runs send just what they want, in that order */
	run->calls = helpers ?
		palloc(sizeof(RedisCall *) * run->nwanted * 3) : run->wanted;
	run->ncalls = 0;
	for (i = 0; i < run->nwanted; i++)
	{
		RedisCall  *call = run->wanted[i];

		if (call->load_script && !run_loads_script(run, call->script))
			queue_call(run, helper_call(call, call->script));
		if (call->asking)
			queue_call(run, helper_call(call, NULL));
		queue_call(run, call);
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
handshake(RedisNode *node, RedisDeadline deadline, int elevel)
{
	RedisConn  *conn = node->conn;
	RedisCall	calls[2];
	RedisCall  *pcalls[2];
	RedisCall  *auth = NULL;
	NodeRun		run = {0};
	int			ncalls = 0;
	int			i;
	const char *username = node->is_sentinel ? conn->sentinel_username :
		conn->username;
	const char *password = node->is_sentinel ? conn->sentinel_password :
		conn->password;

	if (password != NULL)
	{
		auth = &calls[ncalls++];
		redis_call_init(auth, conn, NULL);
		redis_call_arg(auth, "AUTH", 4);
		if (username != NULL)
			redis_call_arg(auth, username, strlen(username));
		redis_call_arg(auth, password, strlen(password));
	}
	if (conn->database != 0 && !node->is_sentinel)
	{
		redis_call_init(&calls[ncalls], conn, NULL);
		redis_call_arg(&calls[ncalls], "SELECT", 6);
		redis_call_int_arg(&calls[ncalls], conn->database);
		ncalls++;
	}
	if (ncalls == 0)
		return true;

	for (i = 0; i < ncalls; i++)
	{
		redis_call_on_node(&calls[i], node);
		pcalls[i] = &calls[i];
	}
	run.node = node;
	run.wanted = pcalls;
	run.nwanted = ncalls;
	send_run(&run);
	if (run.failure == RUN_OK)
		await_replies(&run, 1, deadline.at, elevel);

	if (run.failure != RUN_OK)
	{
		int			sqlstate;

		node_disconnect(node);
		node_set_connect_error(node, psprintf("handshake failed: %s",
											  failure_reason(&run, deadline,
															 &sqlstate)));
		if (run.failure == RUN_TIMED_OUT)
			ereport(elevel,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("could not connect to Redis server \"%s\"",
							conn->servername),
					 errdetail("Connection to %s failed: authentication did not finish within %d ms.",
							   node->endpoint, deadline.ms),
					 errhint("Raise redislock.connect_timeout if Redis is only slow.")));
		else
			report_failure(&run, deadline, elevel);
		return false;
	}

	for (i = 0; i < ncalls; i++)
	{
		if (calls[i].reply_type != REDIS_REPLY_ERROR)
			continue;
		node_disconnect(node);
		node_set_connect_error(node, psprintf("refused: %s", calls[i].str));
		if (&calls[i] == auth)
			node->connect_sqlstate = ERRCODE_INVALID_PASSWORD;
		if (&calls[i] == auth)
			ereport(elevel,
					(errcode(ERRCODE_INVALID_PASSWORD),
					 errmsg("Redis server \"%s\" refused authentication",
							conn->servername),
					 errdetail("Redis at %s answered: %s", node->endpoint,
							   calls[i].str),
					 errhint("Check the username and password options of the user mapping.")));
		else
			ereport(elevel,
					(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
					 errmsg("Redis server \"%s\" refused to select database %d",
							conn->servername, conn->database),
					 errdetail("Redis at %s answered: %s", node->endpoint,
							   calls[i].str)));
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
		node->stalled = false;
		redis_drop_reply(node, reply);
	}
}

/*
 * Make a run's node ready to take calls.  A connection the peer closed
 * while idle is opened again without a word, since nothing of ours was on
 * it.  The check costs a system call, so a connection that answered within
 * the last IDLE_CHECK_USEC is taken as alive.  Connecting and
 * authenticating are bounded by connect_timeout (and by *deadline, unless
 * that counts from the first byte sent: it then starts once connected).
 */
static bool
prepare_node(NodeRun *run, RedisDeadline *deadline, int elevel)
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
	connect_deadline.from_first_byte = false;
	connect_deadline.end_id = deadline->end_id;
	connect_deadline.at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													  redislock_connect_timeout);
	if (!deadline->from_first_byte && deadline->at < connect_deadline.at)
		connect_deadline = *deadline;
	if (!node_connect(node, connect_deadline.at, elevel))
	{
		redis_count(node->conn, REDIS_STAT_ERRORS, 1);
		fail_run(run, RUN_NOT_CONNECTED, 0);
		return false;
	}
	if (node->was_connected)
		redis_count(node->conn, REDIS_STAT_RECONNECTS, 1);
	node->was_connected = true;
	/* a refusal that counts toward a quorum's is reported with the quorum */
	if (!handshake(node, connect_deadline,
				   redis_conn_decides_by_quorum(node->conn) ? DEBUG1 : elevel))
	{
		redis_count(node->conn, REDIS_STAT_ERRORS, 1);
		fail_run(run, RUN_NOT_ACCEPTED, 0);
		return false;
	}
	/* a subscription's connection reads only the replies it asked for */
	if (!run->subscribes)
		redis_send_hello(node);
	redis_send_queued_cleanup(node);
	node->checked = true;
	if (deadline->from_first_byte)
		deadline->at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   deadline->ms);
	return true;
}

/*
 * Ask a server's nodes where calls go, for its topology: the topology
 * chooses each question and learns from its answer, the batch runs it.
 */
static void
ask_topology(RedisConn *conn, RedisDeadline deadline, int elevel)
{
	const RedisTopology *topology = conn->topology;
	RedisQuestion question = {0};

	while (topology->next_question(conn, &question, elevel))
	{
		(void) redis_run_until(&question.call, 1, deadline,
							   question.elevel);
		topology->take_answer(conn, &question);
	}
}

/*
 * Choose the node of every call that has none.  Where calls go (a
 * cluster's slot map, a Sentinel server's master) is asked for first when
 * it is not known or may have changed: once per server and call of this
 * function, so that a set of calls asks once, whatever it finds.
 */
static void
route_calls(RedisCall **calls, int ncalls, RedisDeadline deadline, int elevel)
{
	static uint64 last_round = 0;
	/* asking runs calls of its own, which route with rounds of their own */
	uint64		round = ++last_round;
	int			i;

	for (i = 0; i < ncalls; i++)
	{
		RedisConn  *conn = calls[i]->conn;

		if (calls[i]->node != NULL || conn->routed_round == round ||
			conn->topology->must_ask == NULL || !conn->topology->must_ask(conn))
			continue;
		conn->routed_round = round;
		ask_topology(conn, deadline, elevel);
	}
	redis_route_calls(calls, ncalls);
}

/*
 * The masters of a server, asking where they are first if need be.
 * Returns their number.
 */
int
redis_conn_masters(RedisConn *conn, RedisNode ***masters)
{
	if (conn->topology->must_ask != NULL && conn->topology->must_ask(conn))
		ask_topology(conn, redis_command_deadline(), ERROR);
	return redis_conn_known_masters(conn, masters);
}

/*
 * Connect to the node that serves key now, raising an ERROR on failure.
 * Callers use it before a command whose failure after sending leaves state
 * to clean up, so that a Redis that cannot even be reached is told apart
 * from an unknown outcome.  A cluster node or Sentinel-named master that
 * cannot be reached makes the map or master be asked for again, once.
 * slot is the key's hash slot, or -1 when not computed yet.
 */
void
redis_connect(RedisConn *conn, const char *key, int keylen, int slot)
{
	RedisDeadline deadline = redis_command_deadline();
	RedisCall	call;
	RedisCall  *pcall = &call;
	NodeRun		run = {0};

	/* a quorum's failures are judged when the call runs */
	if (redis_conn_decides_by_quorum(conn))
		return;
	redis_call_init(&call, conn, NULL);
	call.slot = slot;
	redis_call_arg(&call, "", 0);
	redis_call_arg(&call, key, keylen);
	route_calls(&pcall, 1, deadline, ERROR);
	run.node = call.node;
	if (!prepare_node(&run, &deadline, ERROR) &&
		run.failure == RUN_NOT_CONNECTED && redis_conn_learns_nodes(conn))
	{
		redis_conn_lost_node(conn);
		call.node = NULL;
		route_calls(&pcall, 1, deadline, ERROR);
		run.node = call.node;
		run.failure = RUN_OK;
		(void) prepare_node(&run, &deadline, ERROR);
	}
	report_failure(&run, deadline, ERROR);
}

/*
 * Connect and authenticate a node that carries no calls of a batch (a
 * subscription's), within connect_timeout, raising an ERROR on failure.
 */
void
redis_open_node(RedisNode *node)
{
	RedisDeadline deadline = redis_command_deadline();
	NodeRun		run = {0};

	run.node = node;
	run.subscribes = true;
	node->checked = false;
	if (!prepare_node(&run, &deadline, ERROR))
		report_failure(&run, deadline, ERROR);
}

/* Report why a node's replies did not all come */
static void
report_failure(const NodeRun *run, RedisDeadline deadline, int elevel)
{
	const char *server = run->node->conn->servername;
	const char *endpoint = run->node->endpoint;

	switch (run->failure)
	{
		case RUN_OK:
		case RUN_SKIPPED:
		case RUN_NOT_ACCEPTED:
		case RUN_REROUTED:
		case RUN_MOOT:
			break;
		case RUN_NOT_CONNECTED:
			node_report_connect_failure(run->node, elevel);
			break;
		case RUN_TIMED_OUT:
			if (deadline.lock_timeout)
				ereport(elevel,
						(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
						 errmsg("canceling statement due to lock timeout"),
						 errdetail("Waited %d ms for Redis lock \"%.*s\" of server \"%s\" at %s, which did not answer in time; the outcome of the last attempt is unknown.",
								   deadline.ms, (int) run->wanted[0]->argvlen[0],
								   run->wanted[0]->argv[0], server, endpoint)));
			ereport(elevel,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("Redis server \"%s\" did not answer within %d ms",
							server, deadline.ms),
					 errdetail("The command went to %s; its outcome is unknown, and it was not sent again.",
							   endpoint),
					 errhint("Raise redislock.command_timeout if Redis is only slow.")));
			break;
		case RUN_NOT_WAITED:
			ereport(elevel,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("did not wait for Redis server \"%s\", which has not answered an earlier command",
							server),
					 errdetail("The command went to %s and runs after the earlier ones; its outcome is unknown.",
							   endpoint)));
			break;
		case RUN_GIVEN_UP:
			ereport(elevel,
					(errcode(ERRCODE_ADMIN_SHUTDOWN),
					 errmsg("stopped waiting for Redis server \"%s\" because the backend is terminating",
							server),
					 errdetail("The command went to %s; its outcome is unknown, and Redis lock leases end what was left.",
							   endpoint)));
			break;
		case RUN_CLOSED:
			ereport(elevel,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("lost connection to Redis server \"%s\": the server closed the connection",
							server),
					 errdetail("The command went to %s; its outcome is unknown, and it was not sent again.",
							   endpoint)));
			break;
		case RUN_IO_ERROR:
			ereport(elevel,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("lost connection to Redis server \"%s\": %s",
							server, strerror(run->failure_errno)),
					 errdetail("The command went to %s; its outcome is unknown, and it was not sent again.",
							   endpoint)));
			break;
		case RUN_PROTOCOL_ERROR:
			ereport(elevel,
					(errcode(ERRCODE_PROTOCOL_VIOLATION),
					 errmsg("invalid reply from Redis server \"%s\"", server),
					 errdetail("The command went to %s; its outcome is unknown, and it was not sent again.",
							   endpoint)));
			break;
	}
}

/*
 * Why a run's node did not answer, in a few words for a list of Redlock
 * masters, and the SQLSTATE that says so
 */
static const char *
failure_reason(const NodeRun *run, RedisDeadline deadline, int *sqlstate)
{
	*sqlstate = ERRCODE_CONNECTION_FAILURE;
	switch (run->failure)
	{
		case RUN_NOT_CONNECTED:
		case RUN_NOT_ACCEPTED:
			*sqlstate = run->node->connect_sqlstate;
			return run->node->connect_error;
		case RUN_TIMED_OUT:
			return psprintf("no answer within %d ms", deadline.ms);
		case RUN_GIVEN_UP:
			*sqlstate = ERRCODE_ADMIN_SHUTDOWN;
			return "not waited for, the backend is terminating";
		case RUN_NOT_WAITED:
			return "not waited for, an earlier command is unanswered";
		case RUN_IO_ERROR:
			return strerror(run->failure_errno);
		case RUN_CLOSED:
			return "the server closed the connection";
		case RUN_PROTOCOL_ERROR:
			*sqlstate = ERRCODE_PROTOCOL_VIOLATION;
			return "invalid reply";
		case RUN_SKIPPED:
			return "failed earlier in this transaction end";
		default:
			return "no answer";
	}
}

/*
 * The copies that a failed run leaves without a reply count against their
 * quorum, which reports them all at once.
 */
static void
note_quorum_failure(const NodeRun *run, RedisDeadline deadline)
{
	int			sqlstate;
	const char *reason = failure_reason(run, deadline, &sqlstate);
	int			i;

	for (i = 0; i < run->nwanted; i++)
		if (run->wanted[i]->reply_type == 0)
			run->node->conn->topology->note_failure(run->wanted[i], reason,
													sqlstate);
}

/*
 * Did the run fail once its calls were sent?  Failures to connect are
 * counted where they happen, in prepare_node().
 */
static bool
failed_after_sending(RunFailure failure)
{
	return failure == RUN_TIMED_OUT || failure == RUN_GIVEN_UP ||
		failure == RUN_NOT_WAITED || failure == RUN_IO_ERROR ||
		failure == RUN_CLOSED || failure == RUN_PROTOCOL_ERROR;
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

		if (failed_after_sending(run->failure))
			redis_count(run->node->conn, REDIS_STAT_ERRORS, 1);
		if (run->failure == RUN_IO_ERROR || run->failure == RUN_CLOSED ||
			run->failure == RUN_PROTOCOL_ERROR || run->close_after)
			node_disconnect(run->node);
		if (run->failure == RUN_TIMED_OUT)
			run->node->stalled = true;
		if ((run->failure != RUN_OK && run->failure != RUN_NOT_WAITED) ||
			run->close_after)
			redis_conn_lost_node(run->node->conn);
		if (run->failure == RUN_OK || run->failure == RUN_REROUTED ||
			run->failure == RUN_MOOT)
			continue;
		if (deadline.end_id != 0 && run->failure != RUN_NOT_WAITED)
			run->node->failed_end = deadline.end_id;
		if (redis_conn_decides_by_quorum(run->node->conn))
		{
			note_quorum_failure(run, deadline);
			run->failure = RUN_MOOT;	/* reported with its quorum */
			continue;
		}
		ok = false;
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
group_calls(RedisCall **calls, int ncalls, int *nruns_out)
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
			if (runs[r].node == calls[i]->node)
				break;
		if (r == nruns)
		{
			runs[r].node = calls[i]->node;
			nruns++;
		}
		runs[r].nwanted++;
	}
	for (r = 0; r < nruns; r++)
	{
		runs[r].wanted = slots;
		slots += runs[r].nwanted;
		runs[r].nwanted = 0;
	}
	for (i = 0; i < ncalls; i++)
	{
		for (r = 0; runs[r].node != calls[i]->node; r++)
			;
		runs[r].wanted[runs[r].nwanted++] = calls[i];
	}
	*nruns_out = nruns;
	return runs;
}

/* A new round starts: the copies sent again count as outstanding again */
static void
start_round(RedisCall **pending, int npending)
{
	int			i;

	for (i = 0; i < npending; i++)
		if (pending[i]->quorum != NULL)
			pending[i]->conn->topology->start_round(pending[i]);
}

static bool
is_noscript(const RedisCall *call)
{
	return call->script != NULL && redis_reply_is_error(call, "NOSCRIPT");
}

/*
 * Does the node still owe the reply of a call that timed out?  A
 * transaction end does not wait for it once more: that would double what
 * a stalled Redis costs the statement that timed out (a lock_timeout
 * included).
 */
static bool
owes_overdue_reply(const RedisNode *node)
{
	return node->stalled && node->awaiting > 0;
}

/*
 * Send a run's calls without waiting for their replies, as clean-up is
 * sent: Redis runs them after the calls it has not answered yet.
 */
static void
send_unwaited(NodeRun *run, uint64 end_id)
{
	int			i;

	for (i = 0; i < run->nwanted; i++)
		redis_send_cleanup(run->wanted[i], end_id);
	fail_run(run, RUN_NOT_WAITED, 0);
}

/*
 * Connect to every run's node and send its calls.  Nodes that failed
 * earlier in the transaction end under way are skipped.
 */
static void
start_runs(NodeRun *runs, int nruns, RedisDeadline *deadline, int elevel)
{
	int			i;

	for (i = 0; i < nruns; i++)
	{
		if (deadline->end_id != 0 &&
			runs[i].node->failed_end == deadline->end_id)
			fail_run(&runs[i], RUN_SKIPPED, 0);
		else if (!prepare_node(&runs[i], deadline, elevel))
			continue;
		else if (elevel < ERROR && owes_overdue_reply(runs[i].node))
			send_unwaited(&runs[i], deadline->end_id);
		else
			send_run(&runs[i]);
	}
}

/*
 * A cluster node or Sentinel-named master that cannot be reached may have
 * been replaced: nothing was sent to it, so its calls are routed again once
 * the slot map or master has been asked for afresh.  That is done once per
 * set of calls; *rerouted says whether it was.
 */
static void
reroute_unreachable(NodeRun *runs, int nruns, bool *rerouted)
{
	int			i;
	int			j;

	if (*rerouted)
		return;
	for (i = 0; i < nruns; i++)
	{
		if (runs[i].failure != RUN_NOT_CONNECTED ||
			!redis_conn_learns_nodes(runs[i].node->conn))
			continue;
		for (j = 0; j < runs[i].nwanted; j++)
			if (runs[i].wanted[j]->node_given)
				break;
		if (j < runs[i].nwanted)
			continue;
		*rerouted = true;
		runs[i].failure = RUN_REROUTED;
		for (j = 0; j < runs[i].nwanted; j++)
			runs[i].wanted[j]->node = NULL;
	}
}

/*
 * Report the scripts that could not be loaded, as what they are rather
 * than NOSCRIPT (an ACL user without script|load, say).  The calls that
 * needed them get no reply.
 */
static bool
report_failed_loads(NodeRun *runs, int nruns, int elevel)
{
	bool		ok = true;
	int			r;
	int			i;

	for (r = 0; r < nruns; r++)
	{
		for (i = 0; i < runs[r].nreplied; i++)
		{
			RedisCall  *load = runs[r].calls[i];

			if (!load->helper || load->origin == NULL ||
				load->reply_type != REDIS_REPLY_ERROR)
				continue;
			ok = false;
			ereport(elevel,
					(errcode(redis_error_sqlstate(load)),
					 errmsg("could not load Redis script \"%s\" on server \"%s\": %.*s",
							((const RedisScript *) load->origin)->name,
							load->conn->servername,
							(int) strcspn(load->str, " "), load->str),
					 errdetail("Redis at %s answered: %s",
							   runs[r].node->endpoint, load->str),
					 redis_error_hint(load)));
			for (i = 0; i < runs[r].nwanted; i++)
				if (is_noscript(runs[r].wanted[i]))
					runs[r].wanted[i]->reply_type = 0;
			break;
		}
	}
	return ok;
}

/*
 * Wait a little before sending calls answered TRYAGAIN again, serving
 * interrupts.  False when the deadline leaves no time for that.
 */
static bool
pause_before_retry(RedisDeadline deadline, int elevel)
{
	long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
													   deadline.at);

	if (left <= TRYAGAIN_PAUSE_MS)
		return false;
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 TRYAGAIN_PAUSE_MS, redislock_wait_event());
	ResetLatch(MyLatch);
	if (elevel >= ERROR)
		CHECK_FOR_INTERRUPTS();
	return true;
}

/*
 * Should a call of this round go out again?  Yes when it was not run:
 * rerouted, answered NOSCRIPT (its script is loaded first), redirected,
 * READONLY from a master that became a replica, or TRYAGAIN (*tryagain is
 * set); and when the call it follows goes out again.
 */
static bool
send_again(const NodeRun *run, RedisCall *call, bool *tryagain)
{
	bool		asking = call->asking;

	call->asking = false;
	if (call->follows != NULL && call->follows->sent_again)
	{
		call->node = NULL;		/* it goes where that call goes */
		return true;
	}
	if (run->failure == RUN_REROUTED)
		return true;
	if (is_noscript(call))
	{
		call->load_script = true;
		return true;
	}
	if (redis_follow_redirect(call))
	{
		redis_count(call->conn, REDIS_STAT_REDIRECTS, 1);
		return true;
	}
	if (redis_reply_is_error(call, "READONLY") &&
		redis_conn_learns_nodes(call->conn) && !call->node_given)
	{
		call->node = NULL;		/* ask again where the master is; the
								 * topology counts the failover it finds */
		return true;
	}
	if (redis_reply_is_error(call, "TRYAGAIN"))
	{
		call->asking = asking;	/* the same node, the same way */
		*tryagain = true;
		return true;
	}
	return false;
}

/*
 * Take back, from the calls to send again, those answered TRYAGAIN and
 * those that follow them (which go back to the node they ran on): the
 * deadline leaves no time for the pause they need, and they keep that
 * answer.  The others, rerouted or redirected, need no pause and still go.
 * Returns how many are left.
 */
static int
keep_calls_without_pause(RedisCall **pending, int npending)
{
	int			kept = 0;
	int			i;

	for (i = 0; i < npending; i++)
	{
		RedisCall  *call = pending[i];

		if (redis_reply_is_error(call, "TRYAGAIN") ||
			(call->follows != NULL && !call->follows->sent_again))
		{
			call->sent_again = false;
			if (call->follows != NULL)
				call->node = call->follows->node;
			continue;
		}
		pending[kept++] = call;
	}
	return kept;
}

/*
 * The calls of this round that go out again, in pending.  Returns their
 * number.  *only_tryagain says whether TRYAGAIN was the only reason.
 */
static int
calls_to_send_again(NodeRun *runs, int nruns, RedisCall **pending,
					RedisDeadline deadline, int elevel, bool *only_tryagain)
{
	int			npending = 0;
	int			ntryagain = 0;
	int			r;
	int			i;

	for (r = 0; r < nruns; r++)
	{
		for (i = 0; i < runs[r].nwanted; i++)
		{
			RedisCall  *call = runs[r].wanted[i];
			bool		tryagain = false;

			call->sent_again = send_again(&runs[r], call, &tryagain);
			if (call->sent_again)
				pending[npending++] = call;
			if (tryagain)
				ntryagain++;
		}
	}
	*only_tryagain = ntryagain > 0 && ntryagain == npending;
	if (ntryagain > 0 && !pause_before_retry(deadline, elevel))
	{
		*only_tryagain = false;
		npending = keep_calls_without_pause(pending, npending);
	}
	return npending;
}

/*
 * Run calls on their nodes, all in one round trip, within the deadline;
 * calls that were not run (see above) are sent again in further round
 * trips while the deadline allows.  Error replies are left for the caller
 * to interpret.  Failures to reach a node are reported at elevel; when
 * elevel is below ERROR the run goes on with the other nodes and returns
 * false, and the calls that got no reply have reply_type 0.  A run for a
 * SQL function (elevel ERROR) closes the transaction end in progress, if
 * any: the next end gets a deadline of its own.
 */
bool
redis_run_until(RedisCall *calls, int ncalls, RedisDeadline deadline,
				int elevel)
{
	RedisCall **pending;
	int			npending;
	bool		rerouted = false;
	bool		ok = true;
	int			round;
	int			i;

	if (ncalls == 0)
		return true;
	pending = redis_expand_calls(calls, ncalls, &npending);
	for (i = 0; i < npending; i++)
	{
		pending[i]->asking = false;
		pending[i]->load_script = false;
		pending[i]->sent_again = false;
	}

	for (round = 1; npending > 0 && round <= MAX_ROUNDS; round++)
	{
		NodeRun    *runs;
		int			nruns;
		bool		only_tryagain;

		for (i = 0; i < npending; i++)
			pending[i]->reply_type = 0;
		start_round(pending, npending);
		route_calls(pending, npending, deadline, elevel);
		runs = group_calls(pending, npending, &nruns);
		start_runs(runs, nruns, &deadline, elevel);
		await_replies(runs, nruns, deadline.at, elevel);
		/* the last round has none after it to send rerouted calls in */
		if (round < MAX_ROUNDS)
			reroute_unreachable(runs, nruns, &rerouted);
		if (!conclude_runs(runs, nruns, deadline, elevel))
			ok = false;
		if (!report_failed_loads(runs, nruns, elevel))
			ok = false;
		npending = round == MAX_ROUNDS ? 0 :
			calls_to_send_again(runs, nruns, pending, deadline, elevel,
								&only_tryagain);
		if (npending > 0 && only_tryagain)
			round--;			/* waiting out a migration is not a redirection */
		pfree(runs);
	}
	pfree(pending);
	if (!redis_decide_calls(calls, ncalls, elevel))
		ok = false;
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
	deadline.from_first_byte = true;
	deadline.end_id = 0;
	return deadline;
}

/* Run calls for a SQL function: any failure is an ERROR */
void
redis_run(RedisCall *calls, int ncalls)
{
	(void) redis_run_until(calls, ncalls, redis_command_deadline(), ERROR);
}
