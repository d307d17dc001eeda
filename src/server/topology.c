/*-------------------------------------------------------------------------
 *
 * topology.c
 *		Calls routed through their server's topology, and the topology of
 *		a single Redis server.
 *
 * Each kind of server has a table of operations (RedisTopology): a single
 * server's here, a Redis Cluster's in cluster.c, a Sentinel server's in
 * sentinel.c and a Redlock server's in redlock.c.  What the batch and the
 * SQL functions need of a server goes through this file or the table, so
 * that no other file tests the kind.  Nothing here runs calls: routing
 * uses what the topology knows, and what it must ask its nodes the batch
 * asks for it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "server/server.h"

/* A single server: its one node, made from host and port or unix_socket */
static void
single_init(RedisConn *conn, const RedisServerOptions *opts)
{
	conn->nodes = palloc(sizeof(RedisNode *));
	conn->nodes[0] = node_create(conn, opts->host, opts->port,
								 opts->unix_socket);
	conn->nodes[0]->role = "master";
	conn->nnodes = conn->maxnodes = 1;
}

/*
 * The one master of a server whose keys all live on one node: a single
 * server's node, or the master a Sentinel server's Sentinels named last
 * (master_index, 0 until then)
 */
static RedisNode **
one_master(RedisConn *conn)
{
	return &conn->nodes[Max(conn->master_index, 0)];
}

static const RedisTopology single_topology = {
	.init = single_init,
};

/* The topology of a kind of server */
const RedisTopology *
redis_topology_of_kind(RedisServerKind kind)
{
	static const RedisTopology *const topologies[] = {
		[REDIS_SERVER_SINGLE] = &single_topology,
		[REDIS_SERVER_CLUSTER] = &cluster_topology,
		[REDIS_SERVER_SENTINEL] = &sentinel_topology,
		[REDIS_SERVER_REDLOCK] = &redlock_topology,
	};

	return topologies[kind];
}

/*
 * Give conn the topology of its kind of server, and the nodes that the
 * options name.  Called in conn's memory context.
 */
void
redis_conn_init_topology(RedisConn *conn, const RedisServerOptions *opts)
{
	conn->topology = redis_topology_of_kind(opts->kind);
	conn->topology->init(conn, opts);
}

/*
 * The key a call is about: a script's first key, or the first argument of
 * a command.  False for a call without one.
 */
static bool
call_key(const RedisCall *call, const char **key, size_t *len)
{
	int			argno = call->script != NULL ? 0 : 1;

	if ((call->script != NULL && call->nkeys == 0) || call->argc <= argno ||
		call->argv[argno] == NULL)
		return false;
	*key = call->argv[argno];
	*len = call->argvlen[argno];
	return true;
}

/*
 * The node that serves a key now, keeping its slot in *slot if asked.  A
 * server whose keys all live on one node serves them on its one master (on
 * a Sentinel while none was named, whose error reply then tells).
 */
static RedisNode *
node_for_key(RedisConn *conn, const char *key, size_t len, int *slot)
{
	if (conn->topology->node_for_key == NULL)
		return *one_master(conn);
	return conn->topology->node_for_key(conn, key, len, slot);
}

/*
 * Choose the node of every call that has none, from what its server's
 * topology knows now (the batch asks the nodes first when it must).
 */
void
redis_route_calls(RedisCall **calls, int ncalls)
{
	int			i;

	for (i = 0; i < ncalls; i++)
	{
		RedisCall  *call = calls[i];
		const char *key;
		size_t		len;

		if (call->node != NULL)
			continue;
		if (call->follows != NULL)
			call->node = call->follows->node;
		else if (call_key(call, &key, &len))
			call->node = node_for_key(call->conn, key, len, &call->slot);
		else
			call->node = call->conn->nodes[0];
	}
}

/* The node that serves a key now, as last known */
RedisNode *
redis_key_node(RedisConn *conn, const char *key, int keylen)
{
	int			slot = -1;

	return node_for_key(conn, key, keylen, &slot);
}

/* The endpoint that serves a key now, for messages */
const char *
redis_key_endpoint(RedisConn *conn, const char *key, int keylen)
{
	return redis_key_node(conn, key, keylen)->endpoint;
}

/* The masters of a server, each once, as last known: their number */
int
redis_conn_known_masters(RedisConn *conn, RedisNode ***masters)
{
	if (conn->topology->masters == NULL)
	{
		*masters = one_master(conn);
		return 1;
	}
	return conn->topology->masters(conn, masters);
}

/* Send a call where its MOVED or ASK reply says, if its server has those */
bool
redis_follow_redirect(RedisCall *call)
{
	return call->conn->topology->follow_redirect != NULL &&
		call->conn->topology->follow_redirect(call);
}

/*
 * A node failed or said it cannot serve: where calls go may have changed,
 * and a server that learns it by asking asks again before the next call
 */
void
redis_conn_lost_node(RedisConn *conn)
{
	conn->map_stale = true;
}

/*
 * Is a call on this server decided by a quorum of independent masters?
 * The failure of one master is then no failure of the call.
 */
bool
redis_conn_decides_by_quorum(const RedisConn *conn)
{
	return conn->topology->decide != NULL;
}

/*
 * Does the server learn its nodes by asking (a slot map, a master)?  Then
 * a node that cannot be reached, or says READONLY, may have been replaced,
 * and its calls are routed afresh.
 */
bool
redis_conn_learns_nodes(const RedisConn *conn)
{
	return conn->topology->must_ask != NULL;
}

/*
 * Which keys one script call may name together, as a group number for a
 * key of hash slot slot, or -1 when the key goes alone.  A script's keys
 * must share a slot wherever cluster mode is on, so only a server whose
 * keys all live on one node that said it runs without cluster mode (HELLO)
 * takes keys of any slot in one script; a server of independent masters
 * decides each key by a quorum of its own, and takes none together.  While
 * a Cluster migrates a slot, a script whose keys are split between two
 * nodes is refused (TRYAGAIN) until the slot has moved: a call that must
 * run even then (must_run: a release) names one key.
 */
int
redis_conn_script_group(RedisConn *conn, int slot, bool must_run)
{
	if (redis_conn_decides_by_quorum(conn))
		return -1;
	if (conn->topology->node_for_key == NULL && (*one_master(conn))->standalone)
		return 0;
	return must_run ? -1 : slot;
}

/* The clock drift that a lease of ttl_ms on this server must outlast */
int
redis_conn_drift_ms(const RedisConn *conn, int ttl_ms)
{
	if (conn->topology->drift_ms == NULL)
		return 0;
	return conn->topology->drift_ms(ttl_ms);
}

/*
 * The calls to send for calls: each call on a server of independent
 * masters replaced by its copies, the others as they are.  Returns an
 * array of pointers and its length in *npending.
 */
RedisCall **
redis_expand_calls(RedisCall *calls, int ncalls, int *npending)
{
	RedisCall **pending;
	int			n = 0;
	int			i;

	for (i = 0; i < ncalls; i++)
		n += calls[i].conn->topology->expand != NULL ?
			calls[i].conn->nnodes : 1;
	pending = palloc(sizeof(RedisCall *) * n);
	n = 0;
	for (i = 0; i < ncalls; i++)
	{
		RedisCall  *call = &calls[i];

		call->quorum = NULL;
		if (call->conn->topology->expand != NULL)
			n += call->conn->topology->expand(call, &pending[n]);
		else
			pending[n++] = call;
	}
	*npending = n;
	return pending;
}

/*
 * Decide the calls that copies stood for, from what the copies answered.
 * Returns false when one failed (reported at elevel).
 */
bool
redis_decide_calls(RedisCall *calls, int ncalls, int elevel)
{
	bool		ok = true;
	int			i;

	for (i = 0; i < ncalls; i++)
		if (calls[i].quorum != NULL &&
			!calls[i].conn->topology->decide(&calls[i], elevel))
			ok = false;
	return ok;
}
