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

#include "redislock.h"

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
master_is_stale(const RedisConn *conn)
{
	return conn->map_stale || conn->master_index < 0 ||
		TimestampDifferenceExceeds(conn->master_checked_at,
								   GetCurrentTimestamp(), MASTER_RECHECK_MS);
}

/*
 * The address of the master that a Sentinel names, as the index of its
 * node; -1 when the Sentinel cannot be reached, does not know the master
 * or refuses to say (an ACL, say).  A refusal is kept in *refusal for the
 * report made when no Sentinel names a master: the next Sentinel may
 * answer, and a transaction end may not raise an ERROR.
 */
static int
master_named_by(RedisConn *conn, RedisNode *sentinel, RedisDeadline deadline,
				char **refusal)
{
	RedisCall	call;
	int			port;

	redis_call_init(&call, conn, NULL);
	redis_call_on_node(&call, sentinel);
	redis_call_arg(&call, "SENTINEL", 8);
	redis_call_arg(&call, "get-master-addr-by-name", 23);
	redis_call_arg(&call, conn->sentinel_master, strlen(conn->sentinel_master));
	(void) redis_run_until(&call, 1, deadline, DEBUG1);
	if (call.reply_type == REDIS_REPLY_ERROR)
		*refusal = psprintf("Sentinel at %s answered: %s",
							sentinel->endpoint, call.str);
	if (call.reply_type != REDIS_REPLY_ARRAY || call.nelements != 2 ||
		call.elements[0] == NULL || call.elements[1] == NULL)
		return -1;
	port = atoi(call.elements[1]);
	if (port < 1 || port > 65535)
		return -1;
	return redis_conn_node_index(conn, call.elements[0], port);
}

/* Does the node say, with ROLE, that it is a master? */
static bool
confirmed_master(RedisConn *conn, RedisNode *node, RedisDeadline deadline)
{
	RedisCall	call;

	redis_call_init(&call, conn, NULL);
	redis_call_on_node(&call, node);
	redis_call_arg(&call, "ROLE", 4);
	(void) redis_run_until(&call, 1, deadline, DEBUG1);
	return call.reply_type == REDIS_REPLY_ARRAY && call.nelements > 0 &&
		call.elements[0] != NULL && strcmp(call.elements[0], "master") == 0;
}

/*
 * Look for the master through the Sentinels.  A master that did not change
 * needs no confirmation; a new one does.  When no Sentinel names a master
 * that confirms, the calls keep going where they went (they fail there if
 * that master is gone) and the failure is reported at elevel.
 */
static void
find_master(RedisConn *conn, RedisDeadline deadline, int elevel)
{
	RedisNode **sentinels;
	int			nsentinels = redis_conn_nodes_to_ask(conn, true, &sentinels);
	char	   *refusal = NULL;
	int			i;

	conn->map_stale = false;
	for (i = 0; i < nsentinels; i++)
	{
		int			master = master_named_by(conn, sentinels[i], deadline,
											 &refusal);

		if (master < 0)
			continue;
		if (master != conn->master_index &&
			!confirmed_master(conn, conn->nodes[master], deadline))
			continue;
		if (conn->master_index >= 0 && conn->master_index != master)
			conn->nodes[conn->master_index]->role = "unknown";
		conn->master_index = master;
		conn->nodes[master]->role = "master";
		conn->master_checked_at = GetCurrentTimestamp();
		return;
	}
	conn->map_stale = true;
	ereport(elevel,
			(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
			 errmsg("no Sentinel of server \"%s\" named a reachable master \"%s\"",
					conn->servername, conn->sentinel_master),
			 refusal ? errdetail_internal("%s", refusal) : 0,
			 errhint("Check the \"sentinel\" and \"sentinel_master\" options of the foreign server and the Sentinels' credentials in the user mapping.")));
}

/* Look for the master when it is due for another look */
static void
sentinel_refresh(RedisConn *conn, RedisDeadline deadline, int elevel)
{
	if (master_is_stale(conn))
		find_master(conn, deadline, elevel);
}

/*
 * Every key is the master's, the one last named; a Sentinel while none
 * was, whose error reply then tells
 */
static RedisNode *
sentinel_node_for_key(RedisConn *conn, const char *key, size_t len,
					  int *slot)
{
	return conn->nodes[Max(conn->master_index, 0)];
}

/* The master failed or said it cannot serve: ask the Sentinels again */
static void
sentinel_lost_node(RedisConn *conn)
{
	conn->map_stale = true;
}

/* The master, looked for first if due */
static int
sentinel_masters(RedisConn *conn, RedisNode ***masters)
{
	sentinel_refresh(conn, redis_command_deadline(), ERROR);
	*masters = &conn->nodes[conn->master_index];
	return 1;
}

const RedisTopology sentinel_topology = {
	.init = sentinel_init,
	.refresh = sentinel_refresh,
	.node_for_key = sentinel_node_for_key,
	.lost_node = sentinel_lost_node,
	.masters = sentinel_masters,
	.nodes_replaced = true,
	.one_counter = true,
};
