/*-------------------------------------------------------------------------
 *
 * sentinel.c
 *		The topology of a Redis Sentinel server: every call goes to the
 *		master that the Sentinels name.
 *
 * The Sentinels are asked for the master's address (SENTINEL
 * get-master-addr-by-name) in turn, connected ones first, and a new master
 * is confirmed with ROLE before calls go to it, as the Sentinel client
 * guidelines ask.  The master is looked for again after it failed or
 * answered READONLY, and whenever the last look is older than a second:
 * after SENTINEL FAILOVER the old master stays a writable master for
 * seconds, so waiting for READONLY would let locks be taken where they are
 * about to be lost.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "server/server.h"

/* How long a master found through the Sentinels is trusted (milliseconds) */
#define MASTER_RECHECK_MS	1000

/*
 * Make conn a Sentinel server: its first nodes are the Sentinels, and the
 * master is added when found.
 */
static void
sentinel_init(RedisConn *conn, const RedisServerOptions *opts)
{
	redis_conn_add_endpoints(conn, opts->endpoints, "sentinel");
	conn->master_index = -1;
	conn->map_stale = true;
}

/* Is the master found through the Sentinels due for another look? */
static bool
sentinel_must_ask(const RedisConn *conn)
{
	return conn->map_stale || conn->master_index < 0 ||
		TimestampDifferenceExceeds(conn->master_checked_at,
								   GetCurrentTimestamp(), MASTER_RECHECK_MS);
}

/* What a Sentinel server asks, and of whom */
typedef struct MasterAsking
{
	RedisNode **sentinels;		/* connected ones first */
	int			nsentinels;
	int			next;			/* the next Sentinel to ask */
	int			candidate;		/* a new master named, to confirm; or -1 */
	char	   *refusal;		/* the last Sentinel's refusal, if any */
} MasterAsking;

/* Make the node the master: calls go there from now on */
static void
take_master(RedisConn *conn, int master)
{
	if (conn->master_index >= 0 && conn->master_index != master)
	{
		conn->nodes[conn->master_index]->role = "unknown";
		redis_count(conn, REDIS_STAT_FAILOVERS, 1);
	}
	conn->master_index = master;
	conn->nodes[master]->role = "master";
	conn->master_checked_at = GetCurrentTimestamp();
	conn->map_stale = false;
}

/*
 * Look for the master through the Sentinels in turn, connected ones first
 * (SENTINEL get-master-addr-by-name); a new master is confirmed with ROLE
 * before calls go to it, one that did not change needs no confirmation.
 * Failures are kept quiet (DEBUG1).  When no Sentinel names a master that
 * confirms, the calls keep going where they went (they fail there if that
 * master is gone), the master stays due for another look, and the failure
 * is reported at elevel, with the last Sentinel's refusal if one refused:
 * the next Sentinel may answer, and a transaction end may not raise an
 * ERROR.
 */
static bool
sentinel_next_question(RedisConn *conn, RedisQuestion *question, int elevel)
{
	MasterAsking *asking = question->state;
	RedisCall  *call = &question->call;

	if (question->known)
		return false;
	if (asking == NULL)
	{
		asking = palloc0(sizeof(MasterAsking));
		asking->nsentinels = redis_conn_nodes_to_ask(conn, true,
													 &asking->sentinels);
		asking->candidate = -1;
		question->state = asking;
	}
	question->elevel = DEBUG1;
	question->asked++;
	redis_call_init(call, conn, NULL);
	if (asking->candidate >= 0)
	{
		redis_call_on_node(call, conn->nodes[asking->candidate]);
		redis_call_arg(call, "ROLE", 4);
		return true;
	}
	if (asking->next < asking->nsentinels)
	{
		redis_call_on_node(call, asking->sentinels[asking->next++]);
		redis_call_arg(call, "SENTINEL", 8);
		redis_call_arg(call, "get-master-addr-by-name", 23);
		redis_call_arg(call, conn->sentinel_master,
					   strlen(conn->sentinel_master));
		return true;
	}
	conn->map_stale = true;
	ereport(elevel,
			(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
			 errmsg("no Sentinel of server \"%s\" named a reachable master \"%s\"",
					conn->servername, conn->sentinel_master),
			 asking->refusal ? errdetail_internal("%s", asking->refusal) : 0,
			 errhint("Check the \"sentinel\" and \"sentinel_master\" options of the foreign server and the Sentinels' credentials in the user mapping.")));
	return false;
}

/*
 * The index of the master's node in a Sentinel's answer, -1 when it names
 * none
 */
static int
master_named(RedisConn *conn, const RedisCall *call)
{
	int			port;

	if (call->reply_type != REDIS_REPLY_ARRAY || call->nelements != 2 ||
		call->elements[0] == NULL || call->elements[1] == NULL)
		return -1;
	port = atoi(call->elements[1]);
	if (port < 1 || port > 65535)
		return -1;
	return redis_conn_node_index(conn, call->elements[0], port);
}

/*
 * A Sentinel's answer, or a new master's to ROLE.  A Sentinel's refusal
 * (an ACL, say) is kept for the report.
 */
static void
sentinel_take_answer(RedisConn *conn, RedisQuestion *question)
{
	MasterAsking *asking = question->state;
	RedisCall  *call = &question->call;
	int			master;

	if (asking->candidate >= 0)
	{
		if (call->reply_type == REDIS_REPLY_ARRAY && call->nelements > 0 &&
			call->elements[0] != NULL &&
			strcmp(call->elements[0], "master") == 0)
		{
			take_master(conn, asking->candidate);
			question->known = true;
		}
		asking->candidate = -1;
		return;
	}
	if (call->reply_type == REDIS_REPLY_ERROR)
		asking->refusal = psprintf("Sentinel at %s answered: %s",
								   call->node->endpoint, call->str);
	master = master_named(conn, call);
	if (master >= 0 && master == conn->master_index)
	{
		take_master(conn, master);
		question->known = true;
	}
	else
		asking->candidate = master;
}

const RedisTopology sentinel_topology = {
	.init = sentinel_init,

	/* the master, asked of the Sentinels */
	.must_ask = sentinel_must_ask,
	.next_question = sentinel_next_question,
	.take_answer = sentinel_take_answer,
};
