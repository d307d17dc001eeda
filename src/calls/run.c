/*-------------------------------------------------------------------------
 *
 * run.c
 *		One node's part of a set of calls: its calls pipelined, its replies
 *		taken as they arrive, and why they stopped coming if they did.
 *
 * A run is what one node is sent in one round trip: the caller's calls
 * and their helpers (SCRIPT LOAD before a script that Redis did not know,
 * ASKING before a call that an ASK redirected).  Any number of runs are
 * waited for together (run_await_replies()); batch.c makes the runs of a
 * set of calls and decides what their replies mean.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "miscadmin.h"

#include "calls/calls.h"
#include "guc.h"

void
run_fail(NodeRun *run, RunFailure failure, int saved_errno)
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
			run_fail(run, RUN_PROTOCOL_ERROR, 0);
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
		run_fail(run, RUN_IO_ERROR, errno);
		return;
	}
	if (!node_receive(run->node, &closed))
	{
		int			saved_errno = errno;

		/* replies that came before the close still count */
		take_replies(run);
		if (!run_done(run))
			run_fail(run, closed ? RUN_CLOSED : RUN_IO_ERROR, saved_errno);
		return;
	}
	take_replies(run);
}

/*
 * Wait for the replies of every run until all have come or the deadline
 * has passed, serving all nodes in one wait.
 */
void
run_await_replies(NodeRun *runs, int nruns, TimestampTz deadline,
				  int elevel)
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
				run_fail(node_runs[i],
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
void
run_send(NodeRun *run)
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
		run_fail(run, RUN_IO_ERROR, errno);
}

/* Report why a node's replies did not all come */
void
run_report_failure(const NodeRun *run, RedisDeadline deadline, int elevel)
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
const char *
run_failure_reason(const NodeRun *run, RedisDeadline deadline,
				   int *sqlstate)
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
void
run_note_quorum_failure(const NodeRun *run, RedisDeadline deadline)
{
	int			sqlstate;
	const char *reason = run_failure_reason(run, deadline, &sqlstate);
	int			i;

	for (i = 0; i < run->nwanted; i++)
		if (run->wanted[i]->reply_type == 0)
			run->node->conn->topology->note_failure(run->wanted[i], reason,
													sqlstate);
}

/*
 * Did the run fail once its calls were sent?  Failures to connect are
 * counted where they happen, in run_prepare_node().
 */
bool
run_failed_after_sending(RunFailure failure)
{
	return failure == RUN_TIMED_OUT || failure == RUN_GIVEN_UP ||
		failure == RUN_NOT_WAITED || failure == RUN_IO_ERROR ||
		failure == RUN_CLOSED || failure == RUN_PROTOCOL_ERROR;
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
