/*-------------------------------------------------------------------------
 *
 * connect.c
 *		Making a node ready for calls: connecting it, the handshake
 *		(AUTH, SELECT), dropping the late replies of an idle connection,
 *		and asking a server's topology where calls go.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "miscadmin.h"

#include "calls/calls.h"
#include "guc.h"

/* A connection quiet for this long is checked before use (microseconds) */
#define IDLE_CHECK_USEC		1000

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
	run_send(&run);
	if (run.failure == RUN_OK)
		run_await_replies(&run, 1, deadline.at, elevel);

	if (run.failure != RUN_OK)
	{
		int			sqlstate;

		node_disconnect(node);
		node_set_connect_error(node,
							   psprintf("handshake failed: %s",
										run_failure_reason(&run, deadline,
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
			run_report_failure(&run, deadline, elevel);
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
bool
run_prepare_node(NodeRun *run, RedisDeadline *deadline, int elevel)
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
		run_fail(run, RUN_NOT_CONNECTED, 0);
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
		run_fail(run, RUN_NOT_ACCEPTED, 0);
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
	if (!run_prepare_node(&run, &deadline, ERROR))
		run_report_failure(&run, deadline, ERROR);
}
