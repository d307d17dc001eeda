/*-------------------------------------------------------------------------
 *
 * cluster.c
 *		The topology of a Redis Cluster: a call goes to the master of its
 *		key's hash slot.
 *
 * A cluster server starts from its seed nodes.  The slot map (CLUSTER
 * SLOTS) is asked of any node that answers, on first use and again after a
 * node was lost or said it cannot serve.  A MOVED redirection updates the
 * one slot it names and an ASK redirection sends one call to the importing
 * node without changing the map, as the cluster specification asks of
 * clients.  Calls that name no key (SCAN, say) come with their node chosen.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "utils/memutils.h"

#include "server/server.h"

/* One slot range of a CLUSTER SLOTS reply, and the nodes that serve it */
typedef struct SlotRange
{
	int			first;
	int			last;
	List	   *endpoints;		/* master first, then replicas: char * */
} SlotRange;

/*
 * Make conn a cluster server with the given seed endpoints; its slot map
 * is asked for on first use.
 */
static void
cluster_init(RedisConn *conn, const RedisServerOptions *opts)
{
	redis_conn_add_endpoints(conn, opts->endpoints, "unknown");
	conn->slot_owner = MemoryContextAlloc(conn->cxt,
										  sizeof(int16) * REDIS_CLUSTER_SLOTS);
	memset(conn->slot_owner, -1, sizeof(int16) * REDIS_CLUSTER_SLOTS);
	conn->map_stale = true;
}

/*
 * The node to try for a slot: its master when known, else any node, whose
 * redirection will tell.
 */
static RedisNode *
node_for_slot(RedisConn *conn, int slot)
{
	int			owner = conn->slot_owner[slot];
	int			i;

	if (owner >= 0)
		return conn->nodes[owner];
	for (i = 0; i < conn->nnodes; i++)
		if (strcmp(conn->nodes[i]->role, "master") == 0)
			return conn->nodes[i];
	return conn->nodes[0];
}

/*
 * The node for a key: the master of its slot, which is computed once and
 * kept in *slot
 */
static RedisNode *
cluster_node_for_key(RedisConn *conn, const char *key, size_t len, int *slot)
{
	if (*slot < 0)
		*slot = redis_key_slot(key, len);
	return node_for_slot(conn, *slot);
}

/*
 * Keep the slot ranges of a CLUSTER SLOTS reply: each entry is the first
 * and last slot, then the master's address and those of its replicas, each
 * an array that starts with host and port.  An empty host means the node
 * that answered.
 */
static void
parse_slot_ranges(RedisCall *call, const redisReply *reply)
{
	List	   *ranges = NIL;
	size_t		i;
	size_t		j;

	call->reply_type = reply->type;
	if (reply->type != REDIS_REPLY_ARRAY)
		return;
	for (i = 0; i < reply->elements; i++)
	{
		const redisReply *entry = reply->element[i];
		SlotRange  *range;

		if (entry->type != REDIS_REPLY_ARRAY || entry->elements < 3 ||
			entry->element[0]->type != REDIS_REPLY_INTEGER ||
			entry->element[1]->type != REDIS_REPLY_INTEGER ||
			entry->element[0]->integer < 0 ||
			entry->element[1]->integer >= REDIS_CLUSTER_SLOTS ||
			entry->element[0]->integer > entry->element[1]->integer)
			continue;
		range = palloc0(sizeof(SlotRange));
		range->first = (int) entry->element[0]->integer;
		range->last = (int) entry->element[1]->integer;
		for (j = 2; j < entry->elements; j++)
		{
			const redisReply *address = entry->element[j];
			const char *host;

			if (address->type != REDIS_REPLY_ARRAY || address->elements < 2 ||
				address->element[0]->type != REDIS_REPLY_STRING ||
				address->element[1]->type != REDIS_REPLY_INTEGER)
				break;
			host = address->element[0]->len > 0 &&
				strcmp(address->element[0]->str, "?") != 0
				? address->element[0]->str : call->node->host;
			range->endpoints = lappend(range->endpoints,
									   psprintf("%s:%lld", host,
												address->element[1]->integer));
		}
		if (range->endpoints != NIL)
			ranges = lappend(ranges, range);
	}
	call->origin = ranges;
}

/*
 * Count the failovers that a new slot map shows: the nodes that now own
 * slots that another node owned before, and were no master then, which is
 * what a promotion does (a migrated slot goes from master to master, and a
 * redirect to a master it went to has made that one a master already).  A
 * replica may be promoted before a map showed it as one: it need not have
 * been known as a replica.
 */
static void
count_promotions(RedisConn *conn, const int16 *owner_before,
				 const bool *was_master, int nnodes_before)
{
	bool	   *promoted = palloc0(sizeof(bool) * conn->nnodes);
	int			npromoted = 0;
	int			slot;

	for (slot = 0; slot < REDIS_CLUSTER_SLOTS; slot++)
	{
		int			owner = conn->slot_owner[slot];

		if (owner < 0 || owner_before[slot] < 0 ||
			owner_before[slot] == owner || promoted[owner] ||
			(owner < nnodes_before && was_master[owner]))
			continue;
		promoted[owner] = true;
		npromoted++;
	}
	if (npromoted > 0)
		redis_count(conn, REDIS_STAT_FAILOVERS, npromoted);
	pfree(promoted);
}

/* Make the slot ranges of a CLUSTER SLOTS reply conn's map */
static void
apply_slot_ranges(RedisConn *conn, List *ranges)
{
	int16	   *owner_before = palloc(sizeof(int16) * REDIS_CLUSTER_SLOTS);
	int			nnodes_before = conn->nnodes;
	bool	   *was_master = palloc(sizeof(bool) * Max(nnodes_before, 1));
	ListCell   *lc;
	int			i;

	memcpy(owner_before, conn->slot_owner, sizeof(int16) * REDIS_CLUSTER_SLOTS);
	memset(conn->slot_owner, -1, sizeof(int16) * REDIS_CLUSTER_SLOTS);
	for (i = 0; i < conn->nnodes; i++)
	{
		was_master[i] = strcmp(conn->nodes[i]->role, "master") == 0;
		conn->nodes[i]->role = "unknown";
	}
	foreach(lc, ranges)
	{
		SlotRange  *range = lfirst(lc);
		ListCell   *ec;
		int			master = -1;
		int			slot;

		foreach(ec, range->endpoints)
		{
			char	   *host;
			int			port;
			int			index;

			if (!redis_split_endpoint(lfirst(ec), &host, &port))
				continue;
			index = redis_conn_node_index(conn, host, port);
			conn->nodes[index]->role = master < 0 ? "master" : "replica";
			if (master < 0)
				master = index;
		}
		for (slot = range->first; slot <= range->last && master >= 0; slot++)
			conn->slot_owner[slot] = master;
	}
	conn->map_stale = false;
	count_promotions(conn, owner_before, was_master, nnodes_before);
	pfree(owner_before);
	pfree(was_master);
}

/* What a cluster asks its nodes for the slot map, and of whom */
typedef struct SlotMapAsking
{
	RedisNode **nodes;			/* connected ones first */
	int			nnodes;
	RedisNode  *reached;		/* the one that got furthest */
} SlotMapAsking;

/* Must the slot map be asked for: not known, or a node was lost? */
static bool
cluster_must_ask(const RedisConn *conn)
{
	return conn->map_stale;
}

/*
 * CLUSTER SLOTS for each node in turn, connected ones first, failures kept
 * quiet (DEBUG1).  When none gave a map, the node that got furthest is
 * asked once more, at elevel, to report why; then the map stays stale, the
 * calls go where it says, and the next set of calls asks again (not each
 * call of this set).  Failures are reported at elevel, which is below
 * ERROR at a transaction end: nothing there may raise one.
 */
static bool
cluster_next_question(RedisConn *conn, RedisQuestion *question, int elevel)
{
	SlotMapAsking *asking = question->state;
	RedisNode  *node;

	if (question->known)
		return false;
	if (asking == NULL)
	{
		asking = palloc(sizeof(SlotMapAsking));
		asking->nnodes = redis_conn_nodes_to_ask(conn, false, &asking->nodes);
		asking->reached = conn->nodes[0];
		question->state = asking;
	}
	if (question->asked > asking->nnodes)
	{
		conn->map_stale = true;
		ereport(elevel,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("no node of Redis Cluster server \"%s\" gave its slot map",
						conn->servername),
				 errhint("Check the \"cluster\" option of the foreign server.")));
		return false;
	}
	if (question->asked < asking->nnodes)
	{
		node = asking->nodes[question->asked];
		question->elevel = DEBUG1;
	}
	else
	{
		node = asking->reached;
		question->elevel = elevel;
	}
	question->asked++;
	redis_call_init(&question->call, conn, NULL);
	redis_call_on_node(&question->call, node);
	question->call.parse_reply = parse_slot_ranges;
	redis_call_arg(&question->call, "CLUSTER", 7);
	redis_call_arg(&question->call, "SLOTS", 5);
	return true;
}

/*
 * A node's answer: the slot map, made conn's; or a refusal (an ACL without
 * cluster|slots, say), reported at the question's level
 */
static void
cluster_take_answer(RedisConn *conn, RedisQuestion *question)
{
	SlotMapAsking *asking = question->state;
	RedisCall  *call = &question->call;

	if (call->reply_type == REDIS_REPLY_ERROR)
		redis_unexpected_reply(call, "CLUSTER SLOTS", question->elevel);
	if (call->reply_type == REDIS_REPLY_ARRAY && call->origin != NIL)
	{
		apply_slot_ranges(conn, (List *) call->origin);
		question->known = true;
	}
	else if (node_is_connected(call->node) || call->node->connect_error == NULL)
		asking->reached = call->node;
}

/*
 * Follow a MOVED or ASK redirection: the call goes to the node the reply
 * names, and MOVED updates the slot's master.  False when the reply is no
 * redirection.
 */
static bool
cluster_follow_redirect(RedisCall *call)
{
	RedisConn  *conn = call->conn;
	bool		ask = redis_reply_is_error(call, "ASK");
	char	   *slot_text;
	char	   *target;
	char	   *host;
	char	   *end;
	int			port;
	long		slot;
	int			index;

	if (call->node_given || !(ask || redis_reply_is_error(call, "MOVED")))
		return false;

	/* "MOVED <slot> <host>:<port>"; an empty host is the node that answered */
	slot_text = strchr(call->str, ' ');
	if (slot_text == NULL)
		return false;
	slot = strtol(slot_text + 1, &end, 10);
	if (*end != ' ' || slot < 0 || slot >= REDIS_CLUSTER_SLOTS)
		return false;
	target = pstrdup(end + 1);
	if (target[0] == ':')
		target = psprintf("%s%s", call->node->host, target);
	if (!redis_split_endpoint(target, &host, &port))
		return false;

	index = redis_conn_node_index(conn, host, port);
	call->node = conn->nodes[index];
	call->asking = ask;
	if (!ask)
	{
		conn->slot_owner[slot] = index;
		call->node->role = "master";
	}
	return true;
}

/* The masters that serve slots, as the map says.  Returns their number. */
static int
cluster_masters(RedisConn *conn, RedisNode ***masters)
{
	bool	   *seen;
	int			n = 0;
	int			slot;

	seen = palloc0(sizeof(bool) * conn->nnodes);
	*masters = palloc(sizeof(RedisNode *) * conn->nnodes);
	for (slot = 0; slot < REDIS_CLUSTER_SLOTS; slot++)
	{
		int			owner = conn->slot_owner[slot];

		if (owner >= 0 && !seen[owner])
		{
			seen[owner] = true;
			(*masters)[n++] = conn->nodes[owner];
		}
	}
	pfree(seen);
	return n;
}

/*
 * The slot ranges a node serves as a master, e.g. "0-5460,10923", or NULL
 * when none.
 */
static char *
cluster_node_slots(RedisConn *conn, int nodeindex)
{
	StringInfoData buf;
	int			slot = 0;

	initStringInfo(&buf);
	while (slot < REDIS_CLUSTER_SLOTS)
	{
		int			first;

		if (conn->slot_owner[slot] != nodeindex)
		{
			slot++;
			continue;
		}
		first = slot;
		while (slot < REDIS_CLUSTER_SLOTS && conn->slot_owner[slot] == nodeindex)
			slot++;
		if (buf.len > 0)
			appendStringInfoChar(&buf, ',');
		if (slot - 1 == first)
			appendStringInfo(&buf, "%d", first);
		else
			appendStringInfo(&buf, "%d-%d", first, slot - 1);
	}
	return buf.len > 0 ? buf.data : NULL;
}

const RedisTopology cluster_topology = {
	.init = cluster_init,
	.masters = cluster_masters,
	.node_slots = cluster_node_slots,

	/* the slot map, asked of the nodes */
	.must_ask = cluster_must_ask,
	.next_question = cluster_next_question,
	.take_answer = cluster_take_answer,

	/* a call goes to its slot's master, or where a redirection says */
	.node_for_key = cluster_node_for_key,
	.follow_redirect = cluster_follow_redirect,
};
