/*-------------------------------------------------------------------------
 *
 * waker.c
 *		A database's background worker listens for the releases of the
 *		Redis locks that backends there wait for, so that their waits share
 *		its subscriptions instead of opening one each.
 *
 * A backend about to wait in Redis asks for it in its lock table entry
 * (lock/acquire.c).  The worker then subscribes, on a connection of its own
 * to the node that serves the key (to every master of a Redlock server), to
 * the waiter's wake channel, and to the key's keyspace channel where the
 * server publishes keyspace events, as the backend itself would (wake.c);
 * once Redis has confirmed, it answers, and the waiter makes the attempt
 * that queues it.  A message sets the waiter's latch.  One connection per
 * node, server and user mapping carries every channel that the database's
 * waiters need there, and nothing else; a channel is left when its wait
 * ends, and a connection that no wait has needed for a few seconds is
 * closed.  With the preload, only the first local waiter of a lock waits in
 * Redis (locktable.c), so the worker listens for one waiter per lock.
 *
 * Whatever the worker cannot serve it answers as lost: a connection that
 * failed or closed (Sentinel closes those of a master it demotes), a
 * Cluster slot that moved (MOVED, or Redis unsubscribing the channel), a
 * server that cannot be had.  The waiter then asks again, and the worker
 * routes the key afresh, or the waiter subscribes itself.  Waits poll as
 * well, so a worker busy recovering stock delays nobody past the poll.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"

#include "guc.h"
#include "lock/lock.h"
#include "worker/worker.h"

typedef struct WakerNode WakerNode;

/* A waiter's request, as the worker serves it */
typedef struct Listen
{
	LockTableRef ref;			/* the waiter's entry */
	uint32		asked;			/* the request's number */
	RedisConn  *conn;
	List	   *nodes;			/* the WakerNodes it listens on */
	char	   *channel;		/* the waiter's wake channel */
	int			channellen;
	char	   *keyspace;		/* the key's keyspace channel */
	int			keyspacelen;
	int			unconfirmed;	/* subscriptions not yet confirmed */
	int			hears;			/* what every node confirmed: WAKE_* */
	bool		lost;			/* answered WAKE_LOST, and served no more */
	bool		seen;			/* still asked for at the last look */
} Listen;

/* A command on a subscription connection whose answer is to come */
typedef struct Expect
{
	Listen	   *listen;			/* NULL once that listen is gone */
	int			kind;			/* WAKE_ANNOUNCED, WAKE_KEYSPACE, or 0 for
								 * an unsubscription */
	char	   *channel;		/* what an unsubscription leaves */
	int			channellen;
} Expect;

/* A subscription connection to one node of a server */
struct WakerNode
{
	RedisConn  *conn;
	RedisNode  *master;			/* the server's node it listens to */
	RedisNode  *node;			/* its own connection to that node */
	bool		keyspace_events;	/* the server publishes them */
	bool		sharded;		/* SSUBSCRIBE; false on a server without */
	List	   *expects;		/* Expect *, in the order sent */
	List	   *listens;		/* Listen * subscribed here */
	TimestampTz idle_since;		/* since when it has no listens */
	TimestampTz failed_at;		/* its last connect failed then, else 0 */
};

/* A node whose connect failed is not tried again for this long (ms) */
#define RECONNECT_PAUSE_MS	1000

/*
 * A node that no wait has needed for this long (ms) is closed; the worker
 * stays longer than this once its waits have ended (dbworker.c), so that its
 * last looks close them all
 */
#define NODE_IDLE_MS		5000

static MemoryContext waker_cxt = NULL;
static List *waker_nodes = NIL;
static List *listens = NIL;

/* Append a command with its argument to a subscription connection */
static void
append_command(WakerNode *wn, const char *command, const char *arg,
			   int arglen)
{
	RedisCall	call;

	redis_call_init(&call, wn->conn, NULL);
	redis_call_arg(&call, command, strlen(command));
	redis_call_arg(&call, arg, arglen);
	resp_append_call(&wn->node->out, &call);
}

/*
 * Note the answer that the command just appended to wn is to get: the
 * confirmation of listen's subscription of that kind, or of leaving channel
 */
static void
expect(WakerNode *wn, Listen *listen, int kind, const char *channel,
	   int channellen)
{
	Expect	   *e = palloc0(sizeof(Expect));

	e->listen = listen;
	e->kind = kind;
	if (channel != NULL)
	{
		e->channel = pnstrdup(channel, channellen);
		e->channellen = channellen;
	}
	wn->expects = lappend(wn->expects, e);
}

/* Answer a request, once: what it hears, or WAKE_LOST */
static void
answer(Listen *listen, int hears)
{
	locktable_wake_reply(listen->ref, listen->asked, hears);
}

/* Subscribe wn to the channels of listen */
static void
subscribe(WakerNode *wn, Listen *listen)
{
	append_command(wn, wn->sharded ? "SSUBSCRIBE" : "SUBSCRIBE",
				   listen->channel, listen->channellen);
	expect(wn, listen, WAKE_ANNOUNCED, NULL, 0);
	listen->unconfirmed++;
	if (wn->keyspace_events && listen->keyspace != NULL)
	{
		append_command(wn, "SUBSCRIBE", listen->keyspace,
					   listen->keyspacelen);
		expect(wn, listen, WAKE_KEYSPACE, NULL, 0);
		listen->unconfirmed++;
	}
	else
		listen->hears &= ~WAKE_KEYSPACE;
	wn->listens = lappend(wn->listens, listen);
	wn->idle_since = 0;
}

/* Leave listen's channels on wn, and forget what it expected there */
static void
unsubscribe(WakerNode *wn, Listen *listen)
{
	ListCell   *lc;

	foreach(lc, wn->expects)
	{
		Expect	   *e = (Expect *) lfirst(lc);

		if (e->listen == listen)
			e->listen = NULL;
	}
	wn->listens = list_delete_ptr(wn->listens, listen);
	if (wn->listens == NIL)
		wn->idle_since = GetCurrentTimestamp();
	if (!node_is_connected(wn->node))
		return;
	append_command(wn, wn->sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE",
				   listen->channel, listen->channellen);
	expect(wn, NULL, 0, listen->channel, listen->channellen);
	if (wn->keyspace_events && listen->keyspace != NULL)
	{
		append_command(wn, "UNSUBSCRIBE", listen->keyspace,
					   listen->keyspacelen);
		expect(wn, NULL, 0, listen->keyspace, listen->keyspacelen);
	}
}

/* Leave the channels of a request on every node */
static void
leave_nodes(Listen *listen)
{
	ListCell   *lc;

	foreach(lc, listen->nodes)
		unsubscribe((WakerNode *) lfirst(lc), listen);
	list_free(listen->nodes);
	listen->nodes = NIL;
}

/* Forget a request whose wait ended */
static void
drop_listen(Listen *listen)
{
	leave_nodes(listen);
	listens = list_delete_ptr(listens, listen);
	pfree(listen->channel);
	if (listen->keyspace != NULL)
		pfree(listen->keyspace);
	pfree(listen);
}

/*
 * A request can no longer be served: say so, and leave it until its wait
 * asks anew, or ends.  Where its key is served may have changed: the
 * server's nodes are asked again.
 */
static void
lose_listen(Listen *listen)
{
	answer(listen, WAKE_LOST);
	if (listen->conn != NULL)
		redis_conn_lost_node(listen->conn);
	leave_nodes(listen);
	listen->lost = true;
}

/* Forget an answer that was expected, or has come */
static void
free_expect(Expect *e)
{
	if (e->channel != NULL)
		pfree(e->channel);
	pfree(e);
}

/*
 * A subscription connection failed or closed: every request it served is
 * lost, and it connects anew at the next one
 */
static void
lose_node(WakerNode *wn)
{
	ListCell   *lc;

	node_disconnect(wn->node);
	foreach(lc, wn->expects)
		free_expect((Expect *) lfirst(lc));
	list_free(wn->expects);
	wn->expects = NIL;
	while (wn->listens != NIL)
		lose_listen((Listen *) linitial(wn->listens));
}

/* Send what is queued on a subscription connection */
static void
flush_node(WakerNode *wn)
{
	if (!node_is_connected(wn->node))
		return;
	if (!node_flush(wn->node))
		lose_node(wn);
}

/* The subscription has been confirmed on one more node of listen */
static void
confirm(Listen *listen, int kind, bool refused)
{
	if (refused)
		listen->hears &= ~kind;
	if (--listen->unconfirmed == 0)
		answer(listen, listen->hears);
}

/*
 * The answer to the oldest command still unanswered on wn: a confirmation,
 * or an error.  A server without sharded pub/sub is subscribed to again
 * unsharded; a Cluster node that no longer serves the slot (MOVED) makes
 * the request lost, so that the key is routed afresh; any other refusal
 * (an ACL that denies the channel) leaves the waiter polling.
 */
static void
take_answer(WakerNode *wn, const redisReply *reply)
{
	Expect	   *e;
	Listen	   *listen;

	if (wn->expects == NIL)
		return;
	e = (Expect *) linitial(wn->expects);
	wn->expects = list_delete_first(wn->expects);
	listen = e->listen;
	if (listen == NULL || e->kind == 0)
		;
	else if (reply->type != REDIS_REPLY_ERROR)
		confirm(listen, e->kind, false);
	else if (e->kind == WAKE_ANNOUNCED && wn->sharded &&
			 strncmp(reply->str, "ERR unknown command", 19) == 0)
	{
		wn->sharded = false;
		append_command(wn, "SUBSCRIBE", listen->channel, listen->channellen);
		expect(wn, listen, WAKE_ANNOUNCED, NULL, 0);
	}
	else if (strncmp(reply->str, "MOVED ", 6) == 0)
		lose_listen(listen);
	else
		confirm(listen, e->kind, true);
	free_expect(e);
}

/*
 * Redis unsubscribed a channel by itself: the slot moved to another node.
 * An unsubscription of ours is answered in the same words, in order.
 */
static void
take_unsubscription(WakerNode *wn, const redisReply *reply)
{
	ListCell   *lc;

	if (wn->expects != NIL)
	{
		Expect	   *e = (Expect *) linitial(wn->expects);

		if (e->kind == 0 &&
			pubsub_element_is(reply, 1, e->channel, e->channellen))
		{
			take_answer(wn, reply);
			return;
		}
	}
	foreach(lc, wn->listens)
	{
		Listen	   *listen = (Listen *) lfirst(lc);

		if (pubsub_element_is(reply, 1, listen->channel, listen->channellen))
		{
			lose_listen(listen);
			return;
		}
	}
}

/* A message on wn: wake the waiter it is for, if it frees the lock */
static void
take_message(WakerNode *wn, const redisReply *reply)
{
	ListCell   *lc;

	foreach(lc, wn->listens)
	{
		Listen	   *listen = (Listen *) lfirst(lc);

		if (pubsub_element_is(reply, 1, listen->channel, listen->channellen))
		{
			locktable_wake_heard(listen->ref, false);
			return;
		}
		if (listen->keyspace != NULL &&
			pubsub_element_is(reply, 1, listen->keyspace, listen->keyspacelen))
		{
			KeyspaceEvent event = pubsub_keyspace_event(reply->element[2]->str);

			if (event != KEYSPACE_KEEPS)
				locktable_wake_heard(listen->ref, event == KEYSPACE_DEL);
			return;
		}
	}
}

/* Take a reply that came on wn, a subscription connection */
static void
take_reply(void *arg, const redisReply *reply)
{
	WakerNode  *wn = (WakerNode *) arg;

	switch (pubsub_reply_kind(reply))
	{
		case PUBSUB_REPLY_ERROR:
		case PUBSUB_REPLY_SUBSCRIBED:
			take_answer(wn, reply);
			break;
		case PUBSUB_REPLY_MESSAGE:
			take_message(wn, reply);
			break;
		case PUBSUB_REPLY_UNSUBSCRIBED:
			take_unsubscription(wn, reply);
			break;
		case PUBSUB_REPLY_KEYSPACE_CONFIG:
		case PUBSUB_REPLY_OTHER:
			break;
	}
}

/* Read what came on a subscription connection, without blocking */
static void
read_node(WakerNode *wn)
{
	if (!node_is_connected(wn->node))
		return;
	if (!node_take_replies(wn->node, take_reply, wn))
		lose_node(wn);
	else
		flush_node(wn);
}

/*
 * Connect a subscription connection, and learn whether its server
 * publishes keyspace events, before anything is subscribed there: within
 * connect_timeout and command_timeout, raising an ERROR on failure
 */
static void
connect_node(WakerNode *wn)
{
	TimestampTz until;
	redisReply *reply = NULL;
	bool		closed;

	RedisCall	call;

	redis_open_node(wn->node);
	redis_call_init(&call, wn->conn, NULL);
	redis_call_arg(&call, "CONFIG", 6);
	redis_call_arg(&call, "GET", 3);
	redis_call_arg(&call, "notify-keyspace-events", 22);
	resp_append_call(&wn->node->out, &call);
	until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										redislock_command_timeout);
	if (!node_flush(wn->node))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not subscribe at %s", wn->node->endpoint)));
	while (reply == NULL)
	{
		bool		waiting = true;

		if (node_wait(&wn->node, &waiting, 1, until, ERROR) <= 0 ||
			!node_receive(wn->node, &closed) ||
			!node_next_reply(wn->node, &reply))
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("could not subscribe at %s", wn->node->endpoint)));
	}
	wn->keyspace_events = pubsub_keyspace_events_on(reply);
	freeReplyObject(reply);
}

/*
 * The subscription connection to a server's node, made at first use.  It
 * pins the server's connection entry, which a change of the server then
 * retires instead of freeing: a new entry, and new nodes, serve the
 * requests made after the change.
 */
static WakerNode *
waker_node_for(RedisConn *conn, RedisNode *master)
{
	ListCell   *lc;
	WakerNode  *wn;

	foreach(lc, waker_nodes)
	{
		wn = (WakerNode *) lfirst(lc);
		if (wn->conn == conn && wn->master == master)
			return wn;
	}
	wn = palloc0(sizeof(WakerNode));
	wn->conn = conn;
	wn->master = master;
	wn->node = node_create(conn, master->host, master->port,
						   master->unix_socket);
	wn->node->role = "subscriber";
	wn->sharded = true;
	wn->idle_since = GetCurrentTimestamp();
	redis_conn_pin(conn);
	waker_nodes = lappend(waker_nodes, wn);
	return wn;
}

/* Close a subscription connection that serves no request, and forget it */
static void
free_node(WakerNode *wn)
{
	Assert(wn->listens == NIL);
	lose_node(wn);
	node_destroy(wn->node);
	pfree(wn->node);
	redis_conn_unpin(wn->conn);
	pfree(wn);
}

/*
 * Close the subscription connections that serve no request and that no
 * request will need: those idle for NODE_IDLE_MS (a Cluster node whose
 * slots moved, a master that Sentinel replaced, a lock no longer waited
 * for), and those of a server's connection entry that a change of the
 * server or user mapping replaced, which they keep pinned.  Each would
 * otherwise stay open, and keep its entry, for as long as the worker runs.
 */
static void
prune_idle_nodes(void)
{
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	foreach(lc, waker_nodes)
	{
		WakerNode  *wn = (WakerNode *) lfirst(lc);

		if (wn->listens != NIL ||
			(!wn->conn->retired &&
			 now < TimestampTzPlusMilliseconds(wn->idle_since, NODE_IDLE_MS)))
			continue;
		waker_nodes = foreach_delete_current(waker_nodes, lc);
		free_node(wn);
	}
}

/*
 * The nodes that a wait for the entry's key listens on: every master of a
 * Redlock server, or the node that serves the key now
 */
static List *
nodes_of_key(RedisConn *conn, const RedisLockEntry *entry)
{
	List	   *nodes = NIL;

	if (redis_conn_decides_by_quorum(conn))
	{
		RedisNode **masters;
		int			nmasters = redis_conn_known_masters(conn, &masters);
		int			i;

		for (i = 0; i < nmasters; i++)
			nodes = lappend(nodes, waker_node_for(conn, masters[i]));
		return nodes;
	}
	redis_connect(conn, entry->key, entry->keylen,
				  redis_key_slot(entry->key, entry->keylen));
	return list_make1(waker_node_for(conn,
									 redis_key_node(conn, entry->key,
													entry->keylen)));
}

/*
 * The error just caught, copied into cxt, and the error state cleared: the
 * worker logs it and goes on without the node or server that failed
 */
static ErrorData *
caught_error(MemoryContext cxt)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	return edata;
}

/*
 * Connect a node for a request, unless its last connect failed lately;
 * false (logged) when it cannot be reached
 */
static bool
node_ready(WakerNode *wn)
{
	MemoryContext cxt = CurrentMemoryContext;
	bool		ready = true;

	if (node_is_connected(wn->node))
		return true;
	if (wn->failed_at != 0 &&
		GetCurrentTimestamp() < TimestampTzPlusMilliseconds(wn->failed_at,
															RECONNECT_PAUSE_MS))
		return false;
	PG_TRY();
	{
		connect_node(wn);
		wn->failed_at = 0;
	}
	PG_CATCH();
	{
		ErrorData  *edata = caught_error(cxt);

		ereport(LOG,
				(errcode(edata->sqlerrcode),
				 errmsg("could not listen for the releases of Redis locks at %s",
						wn->node->endpoint),
				 errdetail_internal("%s", edata->message)));
		FreeErrorData(edata);
		node_disconnect(wn->node);
		wn->failed_at = GetCurrentTimestamp();
		ready = false;
	}
	PG_END_TRY();
	return ready;
}

/*
 * Find the nodes a request listens on, connected: on a Redlock server the
 * masters that can be reached, as a waiter's own subscription has them;
 * else the node that serves the key.  False (the request answered lost)
 * when there is none, or routing failed.
 */
static bool
route_request(Listen *listen, const RedisLockEntry *entry)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *nodes = NIL;
	ListCell   *lc;

	PG_TRY();
	{
		nodes = nodes_of_key(listen->conn, entry);
	}
	PG_CATCH();
	{
		ErrorData  *edata = caught_error(cxt);

		ereport(LOG,
				(errcode(edata->sqlerrcode),
				 errmsg("could not listen for the releases of Redis locks on server \"%s\"",
						listen->conn->servername),
				 errdetail_internal("%s", edata->message)));
		FreeErrorData(edata);
		nodes = NIL;
	}
	PG_END_TRY();
	foreach(lc, nodes)
	{
		WakerNode  *wn = (WakerNode *) lfirst(lc);

		if (node_ready(wn))
			listen->nodes = lappend(listen->nodes, wn);
	}
	list_free(nodes);
	if (listen->nodes != NIL)
		return true;
	lose_listen(listen);
	return false;
}

/* Start serving a request: subscribe to the waiter's channels */
static void
serve_request(const RedisLockEntry *entry, uint32 asked, RedisConn *conn)
{
	Listen	   *listen = palloc0(sizeof(Listen));
	ListCell   *lc;

	listen->ref.index = entry->index;
	listen->ref.id = entry->id;
	listen->asked = asked;
	listen->conn = conn;
	listen->hears = WAKE_ANNOUNCED | WAKE_KEYSPACE;
	listen->seen = true;
	listen->channel = redis_wake_channel(entry->key, entry->keylen,
										 entry->prefixlen,
										 redis_key_slot(entry->key,
														entry->keylen),
										 entry->token, &listen->channellen);
	listens = lappend(listens, listen);
	if (conn == NULL)
	{
		lose_listen(listen);
		return;
	}
	listen->keyspace = redis_keyspace_channel(conn->database, entry->key,
											  entry->keylen, &listen->keyspacelen);
	if (!route_request(listen, entry))
		return;
	foreach(lc, listen->nodes)
		subscribe((WakerNode *) lfirst(lc), listen);
}

/* The request being served for the entry of ref, if any */
static Listen *
listen_of(LockTableRef ref)
{
	ListCell   *lc;

	foreach(lc, listens)
	{
		Listen	   *listen = (Listen *) lfirst(lc);

		if (listen->ref.index == ref.index && listen->ref.id == ref.id)
			return listen;
	}
	return NULL;
}

/*
 * Look at the lock table: serve the requests of this database's waiters
 * that are new, and forget those whose wait ended.  The connections of
 * new requests are found in a transaction, as the watchdog finds its own,
 * and Redis is talked to after it.  What the look needs only while it
 * looks is made in tmpcxt.
 */
static void
look_at_requests(MemoryContext tmpcxt)
{
	int			n;
	RedisLockEntry *entries;
	List	   *new_entries = NIL;
	List	   *ended = NIL;
	RedisConn **conns;
	ListCell   *lc;
	int			i;

	MemoryContextSwitchTo(tmpcxt);
	entries = locktable_copy_database(true, &n);

	foreach(lc, listens)
		((Listen *) lfirst(lc))->seen = false;
	for (i = 0; i < n; i++)
	{
		RedisLockEntry *entry = &entries[i];
		uint32		asked = pg_atomic_read_u32(&entry->wake_asked);
		LockTableRef ref = {entry->index, entry->id};
		Listen	   *listen;

		if (asked == 0 || !entry->key_complete)
			continue;
		listen = listen_of(ref);
		if (listen != NULL && listen->asked == asked)
			listen->seen = true;
		else
			new_entries = lappend(new_entries, entry);
	}
	foreach(lc, listens)
		if (!((Listen *) lfirst(lc))->seen)
			ended = lappend(ended, lfirst(lc));
	MemoryContextSwitchTo(waker_cxt);
	foreach(lc, ended)
		drop_listen((Listen *) lfirst(lc));
	if (new_entries == NIL)
		return;
	conns = MemoryContextAlloc(tmpcxt,
							   sizeof(RedisConn *) * list_length(new_entries));
	StartTransactionCommand();
	MemoryContextSwitchTo(waker_cxt);
	foreach(lc, new_entries)
	{
		RedisLockEntry *entry = (RedisLockEntry *) lfirst(lc);

		conns[foreach_current_index(lc)] =
			redis_conn_for_worker(entry->serverid, entry->userid);
	}
	CommitTransactionCommand();
	MemoryContextSwitchTo(waker_cxt);
	foreach(lc, new_entries)
	{
		RedisLockEntry *entry = (RedisLockEntry *) lfirst(lc);

		serve_request(entry, pg_atomic_read_u32(&entry->wake_asked),
					  conns[foreach_current_index(lc)]);
	}
}

/*
 * Serve the database's waiters: read what came on the subscriptions, and
 * take up the requests made and ended since the last look, looking at the
 * lock table only when some were (a hot lock's hand-off brings a message
 * each time, and a look copies the database's requests); then close the
 * connections no longer needed.  Returns how many requests are served.
 * The caller's memory context is reset before the next call; what lasts
 * is kept in waker_cxt.
 */
int
waker_serve(void)
{
	static bool looked = false;
	static uint32 looked_at_changes;
	MemoryContext oldcxt;
	uint32		changes;
	ListCell   *lc;

	if (waker_cxt == NULL)
		waker_cxt = AllocSetContextCreate(TopMemoryContext,
										  "redislock waker",
										  ALLOCSET_DEFAULT_SIZES);
	oldcxt = MemoryContextSwitchTo(waker_cxt);
	foreach(lc, waker_nodes)
		read_node((WakerNode *) lfirst(lc));
	changes = locktable_wake_changes();
	if (!looked || changes != looked_at_changes)
	{
		looked = true;
		looked_at_changes = changes;
		look_at_requests(oldcxt);
	}
	prune_idle_nodes();
	foreach(lc, waker_nodes)
		flush_node((WakerNode *) lfirst(lc));
	MemoryContextSwitchTo(oldcxt);
	return list_length(listens);
}

/* Add the sockets of the subscription connections to a wait event set */
void
waker_add_sockets(WaitEventSet *set)
{
	ListCell   *lc;

	foreach(lc, waker_nodes)
	{
		WakerNode  *wn = (WakerNode *) lfirst(lc);

		if (node_is_connected(wn->node))
			AddWaitEventToSet(set, WL_SOCKET_READABLE, wn->node->sock, NULL,
							  NULL);
	}
}

/* How many sockets waker_add_sockets() adds */
int
waker_nsockets(void)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, waker_nodes)
		if (node_is_connected(((WakerNode *) lfirst(lc))->node))
			n++;
	return n;
}
