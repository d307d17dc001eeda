/*-------------------------------------------------------------------------
 *
 * registry.c
 *		The nodes a server knows of, and the "host:port" endpoints that name
 *		them.
 *
 * A server starts with the nodes its options list (one Redis, a cluster's
 * seeds, the Sentinels, the Redlock masters) and learns of others as they
 * are named (a slot map, a Sentinel's answer, a redirection).  A node is
 * kept for as long as its server's connection cache entry, so that its
 * connection is reused however it was found.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "server/server.h"

/*
 * Split "host:port" in place; the host may be bracketed, as IPv6 addresses
 * are.  False when it is not of that form.
 */
bool
redis_split_endpoint(char *entry, char **host, int *port)
{
	char	   *colon = strrchr(entry, ':');
	char	   *end;
	long		number;

	if (colon == NULL)
		return false;
	*colon = '\0';
	errno = 0;
	number = strtol(colon + 1, &end, 10);
	if (errno != 0 || end == colon + 1 || *end != '\0' ||
		number < 1 || number > 65535)
		return false;
	if (entry[0] == '[' && colon > entry + 1 && colon[-1] == ']')
	{
		colon[-1] = '\0';
		entry++;
	}
	if (entry[0] == '\0')
		return false;
	*host = entry;
	*port = (int) number;
	return true;
}

/*
 * The entries of a list of endpoints, "host:port, host:port, ...", as
 * palloc'd strings.  NIL with *bad_entry set when an entry is malformed.
 */
List *
redis_parse_endpoints(const char *list, const char **bad_entry)
{
	char	   *copy = pstrdup(list);
	List	   *entries = NIL;
	char	   *entry;
	char	   *next;

	*bad_entry = NULL;
	for (entry = copy; entry != NULL; entry = next)
	{
		char	   *host;
		int			port;
		char	   *trimmed;

		next = strchr(entry, ',');
		if (next != NULL)
			*next++ = '\0';
		while (*entry == ' ' || *entry == '\t')
			entry++;
		trimmed = entry + strlen(entry);
		while (trimmed > entry && (trimmed[-1] == ' ' || trimmed[-1] == '\t'))
			*--trimmed = '\0';
		trimmed = pstrdup(entry);
		if (!redis_split_endpoint(entry, &host, &port))
		{
			*bad_entry = trimmed;
			return NIL;
		}
		entries = lappend(entries, trimmed);
	}
	return entries;
}

/* Add a node to conn's list of nodes, returning its index */
static int
add_node(RedisConn *conn, RedisNode *node)
{
	if (conn->nnodes == conn->maxnodes)
	{
		conn->maxnodes = Max(conn->maxnodes * 2, 8);
		if (conn->nodes == NULL)
			conn->nodes = MemoryContextAlloc(conn->cxt,
											 sizeof(RedisNode *) * conn->maxnodes);
		else
			conn->nodes = repalloc(conn->nodes,
								   sizeof(RedisNode *) * conn->maxnodes);
	}
	conn->nodes[conn->nnodes] = node;
	return conn->nnodes++;
}

/* The index of the node at host:port, added if it is new */
int
redis_conn_node_index(RedisConn *conn, const char *host, int port)
{
	int			i;

	for (i = 0; i < conn->nnodes; i++)
	{
		RedisNode  *node = conn->nodes[i];

		if (node->host != NULL && node->port == port &&
			strcmp(node->host, host) == 0)
			return i;
	}
	return add_node(conn, node_create(conn, host, port, NULL));
}

/*
 * Add a node in role for each endpoint (from redis_parse_endpoints).
 * Sentinels authenticate with credentials of their own.
 */
void
redis_conn_add_endpoints(RedisConn *conn, List *endpoints, const char *role)
{
	ListCell   *lc;

	foreach(lc, endpoints)
	{
		char	   *entry = pstrdup(lfirst(lc));
		char	   *host;
		int			port;

		if (redis_split_endpoint(entry, &host, &port))
		{
			/* the index first: finding it may move conn->nodes */
			int			index = redis_conn_node_index(conn, host, port);
			RedisNode  *node = conn->nodes[index];

			node->role = role;
			node->is_sentinel = strcmp(role, "sentinel") == 0;
		}
	}
}

/*
 * A connection of its own to master, for subscriptions: it carries nothing
 * but pub/sub, so it is no node of the server's, but the entry closes it
 * with them.
 */
RedisNode *
redis_conn_add_subscriber(RedisConn *conn, const RedisNode *master)
{
	RedisNode  *node = node_create(conn, master->host, master->port,
								   master->unix_socket);
	MemoryContext oldcxt = MemoryContextSwitchTo(conn->cxt);

	node->role = "subscriber";
	conn->subscribers = lappend(conn->subscribers, node);
	MemoryContextSwitchTo(oldcxt);
	return node;
}

/*
 * The nodes to ask where the others are, the Sentinels or the data nodes,
 * connected ones first: they answer at once, and a seed or Sentinel may be
 * down.  The list is taken before asking, which may add nodes to conn.
 * Returns its length.
 */
int
redis_conn_nodes_to_ask(RedisConn *conn, bool sentinels, RedisNode ***nodes)
{
	RedisNode **order = palloc(sizeof(RedisNode *) * conn->nnodes);
	int			n = 0;
	int			pass;
	int			i;

	for (pass = 0; pass < 2; pass++)
	{
		for (i = 0; i < conn->nnodes; i++)
		{
			RedisNode  *node = conn->nodes[i];

			if (node->is_sentinel == sentinels &&
				node_is_connected(node) == (pass == 0))
				order[n++] = node;
		}
	}
	*nodes = order;
	return n;
}
