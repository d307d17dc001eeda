/*-------------------------------------------------------------------------
 *
 * batch.c
 *		The one way calls reach Redis: a set of calls over any number of
 *		nodes, in one round trip against one absolute deadline.
 *
 * Every node involved first gets all of its calls, pipelined (a run:
 * run.c, on a node that connect.c made ready); then one wait serves all of
 * them and replies are taken as they arrive, so a set of calls costs the
 * slowest node's round trip rather than the sum.  Some
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

/*
 * Round trips one set of calls may take for redirections and script loads;
 * TRYAGAIN is retried for as long as the deadline allows.
 */
#define MAX_ROUNDS			8

/* The pause before calls answered TRYAGAIN are sent again (milliseconds) */
#define TRYAGAIN_PAUSE_MS	20

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
	if (!run_prepare_node(&run, &deadline, ERROR) &&
		run.failure == RUN_NOT_CONNECTED && redis_conn_learns_nodes(conn))
	{
		redis_conn_lost_node(conn);
		call.node = NULL;
		route_calls(&pcall, 1, deadline, ERROR);
		run.node = call.node;
		run.failure = RUN_OK;
		(void) run_prepare_node(&run, &deadline, ERROR);
	}
	run_report_failure(&run, deadline, ERROR);
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

		if (run_failed_after_sending(run->failure))
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
			run_note_quorum_failure(run, deadline);
			run->failure = RUN_MOOT;	/* reported with its quorum */
			continue;
		}
		ok = false;
	}
	for (i = 0; i < nruns; i++)
		run_report_failure(&runs[i], deadline, elevel);
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
	run_fail(run, RUN_NOT_WAITED, 0);
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
			run_fail(&runs[i], RUN_SKIPPED, 0);
		else if (!run_prepare_node(&runs[i], deadline, elevel))
			continue;
		else if (elevel < ERROR && owes_overdue_reply(runs[i].node))
			send_unwaited(&runs[i], deadline->end_id);
		else
			run_send(&runs[i]);
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
 * to interpret; the parts of a call on several keys each get their own
 * answer, or the call's reply when it answered none.  Failures to reach a
 * node are reported at elevel; when elevel is below ERROR the run goes on
 * with the other nodes and returns false, and the calls that got no reply
 * have reply_type 0.  A run for a SQL function (elevel ERROR) closes the
 * transaction end in progress, if any: the next end gets a deadline of its
 * own.
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
		run_await_replies(runs, nruns, deadline.at, elevel);
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
	for (i = 0; i < ncalls; i++)
		redis_call_spread_reply(&calls[i]);
	return ok;
}


/* Run calls for a SQL function: any failure is an ERROR */
void
redis_run(RedisCall *calls, int ncalls)
{
	(void) redis_run_until(calls, ncalls, redis_command_deadline(), ERROR);
}
