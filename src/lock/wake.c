/*-------------------------------------------------------------------------
 *
 * wake.c
 *		Subscriptions that wake a backend waiting for a Redis lock when the
 *		lock is released.
 *
 * Our release announces itself to the first waiter queued beside the lock,
 * on that waiter's own channel (scripts.c), so that one waiter tries again,
 * not all of them.  A waiter subscribes before the attempt that queues it,
 * so that no release can fall between its attempt and its wait.  Releases
 * by other clients and expiries announce nothing: they are heard through
 * keyspace events when the Redis server publishes them
 * (notify-keyspace-events holds K, g and x), and found by polling
 * otherwise (acquire.c).
 *
 * A subscription has a connection of its own to the node that serves the
 * key (to each master, for Redlock), which carries nothing but pub/sub:
 * the connection is asked once, when it connects, whether the server
 * publishes keyspace events.  It stays subscribed to the channel of the
 * last lock awaited there, so that waiting for the same lock again costs no
 * round trip.  That wakes nobody by mistake: a waiter leaves the queue in
 * the attempt that takes the lock, and unsubscribes when it gives up (an
 * error closes its subscriptions), so a release never announces itself to
 * a backend that does not wait.  A keyspace channel carries every change
 * of the key, and is left when the wait ends.  The connections close with
 * their server's connection entry.
 *
 * The connection is made and authenticated by calls/connect.c and read
 * here through io/node.c, without blocking, so cancel, statement_timeout
 * and termination end a wait as they end any other, and so does the latch
 * being set for any other reason: the waiter then looks at the lock again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/memutils.h"

#include "lock/lock.h"

/* Whether a node's server publishes keyspace events, learnt per connect */
typedef enum KeyspaceEvents
{
	KEYSPACE_UNKNOWN,
	KEYSPACE_ASKED,				/* CONFIG GET sent, its answer not read */
	KEYSPACE_OFF,
	KEYSPACE_ON
} KeyspaceEvents;

/* What a subscription command's reply, still to come, confirms */
typedef enum Expected
{
	EXPECT_NOTHING,
	EXPECT_WAKE,
	EXPECT_KEYSPACE
} Expected;

/* A subscription connection to one node of a server */
typedef struct WakeNode
{
	RedisNode  *master;			/* the server's node it listens to */
	RedisNode  *node;			/* its own connection to that node */
	char	   *channel;		/* the wake channel subscribed, or NULL */
	int			channellen;
	bool		sharded;		/* SSUBSCRIBE; false on a server without */
	char	   *keyspace;		/* the keyspace channel subscribed, or NULL */
	int			keyspacelen;
	KeyspaceEvents keyspace_events;
	Expected	expected[2];	/* confirmations to come, in order */
	bool		refused;		/* the server refused the wake channel */
	bool		in_wait;		/* listened to by the current wait */
	bool		heard;			/* a release was heard */
	bool		holder_announces;	/* a "del" is announced to us anyway */
} WakeNode;

/* The node of a server, and its subscription connection, made at first use */
static WakeNode *
wake_node_for(RedisConn *conn, RedisNode *master)
{
	ListCell   *lc;
	WakeNode   *wn;
	MemoryContext oldcxt;

	foreach(lc, conn->wake_nodes)
	{
		wn = (WakeNode *) lfirst(lc);
		if (wn->master == master)
			return wn;
	}
	oldcxt = MemoryContextSwitchTo(conn->cxt);
	wn = palloc0(sizeof(WakeNode));
	wn->master = master;
	wn->node = redis_conn_add_subscriber(conn, master);
	wn->sharded = true;
	conn->wake_nodes = lappend(conn->wake_nodes, wn);
	MemoryContextSwitchTo(oldcxt);
	return wn;
}

/* Forget what a closed subscription connection had */
static void
forget_subscriptions(WakeNode *wn)
{
	node_disconnect(wn->node);
	if (wn->channel != NULL)
		pfree(wn->channel);
	wn->channel = NULL;
	if (wn->keyspace != NULL)
		pfree(wn->keyspace);
	wn->keyspace = NULL;
	wn->keyspace_events = KEYSPACE_UNKNOWN;
	wn->expected[0] = wn->expected[1] = EXPECT_NOTHING;
	wn->refused = false;
}

/*
 * The nodes a wait for key listens to: every master a Redlock server can
 * reach now, or the node that serves the key.  Marks them in_wait, and
 * returns their number.
 */
static int
mark_wait_nodes(RedisConn *conn, const char *key, int keylen)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, conn->wake_nodes)
		((WakeNode *) lfirst(lc))->in_wait = false;
	if (redis_conn_decides_by_quorum(conn))
	{
		RedisNode **masters;
		int			nmasters = redis_conn_known_masters(conn, &masters);
		int			i;

		for (i = 0; i < nmasters; i++)
			if (node_is_connected(masters[i]))
			{
				wake_node_for(conn, masters[i])->in_wait = true;
				n++;
			}
		return n;
	}
	wake_node_for(conn, redis_key_node(conn, key, keylen))->in_wait = true;
	return 1;
}

/*
 * Is every node that a wait for key listens to subscribed to channel
 * already (and to the key's keyspace events, where its server has them),
 * so that an attempt may queue the waiter at once?
 */
bool
wake_listening(RedisConn *conn, const char *key, int keylen,
			   const char *channel, int channellen)
{
	ListCell   *lc;

	/* no subscription yet: nothing to look at, and no node to make */
	if (conn->wake_nodes == NIL || mark_wait_nodes(conn, key, keylen) == 0)
		return false;
	foreach(lc, conn->wake_nodes)
	{
		WakeNode   *wn = (WakeNode *) lfirst(lc);

		if (wn->in_wait &&
			(!node_is_connected(wn->node) || wn->channel == NULL ||
			 wn->channellen != channellen ||
			 memcmp(wn->channel, channel, channellen) != 0 ||
			 (wn->keyspace_events == KEYSPACE_ON && wn->keyspace == NULL)))
			return false;
	}
	return true;
}

/* Queue a command of up to three arguments on a subscription connection */
static void
append_command(WakeNode *wn, const char *command, const char *arg1,
			   int arg1len, const char *arg2, int arg2len)
{
	RedisCall	call;

	redis_call_init(&call, wn->node->conn, NULL);
	redis_call_arg(&call, command, strlen(command));
	redis_call_arg(&call, arg1, arg1len);
	if (arg2 != NULL)
		redis_call_arg(&call, arg2, arg2len);
	resp_append_call(&wn->node->out, &call);
}

/*
 * Send what is queued.  Pub/sub commands are small and the connection
 * carries nothing else, so they go out at once; a connection that takes
 * them only in part, or fails, is closed.  False then.
 */
static bool
send_commands(WakeNode *wn)
{
	if (node_flush(wn->node) && wn->node->out.len == 0)
		return true;
	forget_subscriptions(wn);
	return false;
}

/* A message, on a channel wn listens to: is it a release? */
static void
take_message(WakeNode *wn, const redisReply *reply)
{
	if (wn->channel != NULL &&
		pubsub_element_is(reply, 1, wn->channel, wn->channellen))
	{
		wn->heard = true;
		return;
	}
	if (wn->keyspace == NULL ||
		!pubsub_element_is(reply, 1, wn->keyspace, wn->keyspacelen))
		return;
	/* our own DEL is announced */
	switch (pubsub_keyspace_event(reply->element[2]->str))
	{
		case KEYSPACE_FREES:
			wn->heard = true;
			break;
		case KEYSPACE_DEL:
			wn->heard = wn->heard || !wn->holder_announces;
			break;
		case KEYSPACE_KEEPS:
			break;
	}
}

/* The answer to the oldest subscription command still unanswered */
static void
take_confirmation(WakeNode *wn, const redisReply *reply)
{
	Expected	what = wn->expected[0];

	wn->expected[0] = wn->expected[1];
	wn->expected[1] = EXPECT_NOTHING;
	if (reply->type != REDIS_REPLY_ERROR)
		return;
	if (what == EXPECT_KEYSPACE)
	{
		pfree(wn->keyspace);
		wn->keyspace = NULL;
		wn->keyspace_events = KEYSPACE_OFF;
	}
	else if (what == EXPECT_WAKE && wn->sharded &&
			 strncmp(reply->str, "ERR unknown command", 19) == 0)
	{
		/* a server before Redis 7: the release publishes unsharded */
		wn->sharded = false;
		wn->expected[1] = wn->expected[0];
		wn->expected[0] = EXPECT_WAKE;
		append_command(wn, "SUBSCRIBE", wn->channel, wn->channellen, NULL, 0);
		(void) send_commands(wn);
	}
	else if (what == EXPECT_WAKE)
	{
		/* an ACL that denies the channel, say: polling finds releases */
		pfree(wn->channel);
		wn->channel = NULL;
		wn->refused = true;
	}
}

/* Take a reply that came on wn, a subscription connection */
static void
take_reply(void *arg, const redisReply *reply)
{
	WakeNode   *wn = (WakeNode *) arg;

	switch (pubsub_reply_kind(reply))
	{
		case PUBSUB_REPLY_ERROR:
			/* CONFIG GET goes alone: an error answering it is an ACL's */
			if (wn->keyspace_events == KEYSPACE_ASKED)
				wn->keyspace_events = KEYSPACE_OFF;
			else
				take_confirmation(wn, reply);
			break;
		case PUBSUB_REPLY_KEYSPACE_CONFIG:
			wn->keyspace_events = pubsub_keyspace_events_on(reply) ?
				KEYSPACE_ON : KEYSPACE_OFF;
			break;
		case PUBSUB_REPLY_MESSAGE:
			take_message(wn, reply);
			break;
		case PUBSUB_REPLY_SUBSCRIBED:
			take_confirmation(wn, reply);
			break;
		case PUBSUB_REPLY_UNSUBSCRIBED:
			if (pubsub_element_is(reply, 0, "sunsubscribe", 12) &&
				wn->channel != NULL &&
				pubsub_element_is(reply, 1, wn->channel, wn->channellen) &&
				wn->expected[0] != EXPECT_WAKE)
			{
				/* the slot moved to another node: look there */
				pfree(wn->channel);
				wn->channel = NULL;
				wn->heard = true;
			}
			break;
		case PUBSUB_REPLY_OTHER:
			break;
	}
}

/*
 * Read what came on a subscription connection.  A connection that failed
 * or closed is forgotten, and counts as heard: the waiter looks again and
 * subscribes anew.  CONFIG GET's answer is an array like the others, so
 * it is only asked on a connection with no subscription yet.
 */
static void
read_replies(WakeNode *wn)
{
	if (node_is_connected(wn->node) &&
		!node_take_replies(wn->node, take_reply, wn))
	{
		forget_subscriptions(wn);
		wn->heard = true;
	}
}

/* Is wn still waiting for an answer? */
static bool
awaits_answer(const WakeNode *wn)
{
	return node_is_connected(wn->node) &&
		(wn->keyspace_events == KEYSPACE_ASKED ||
		 wn->expected[0] != EXPECT_NOTHING);
}

/*
 * Wait until the nodes of the current wait have answered what they were
 * asked, or the deadline passed: those that have not are closed, and the
 * waiter polls them.  A command_timeout counts from now, for each round
 * trip, as it does for a call; a lock_timeout bounds them all.
 */
static void
await_answers(RedisConn *conn, RedisDeadline deadline)
{
	TimestampTz until = deadline.from_first_byte ?
		TimestampTzPlusMilliseconds(GetCurrentTimestamp(), deadline.ms) :
		deadline.at;
	int			n = list_length(conn->wake_nodes);
	RedisNode **nodes = palloc(sizeof(RedisNode *) * n);
	bool	   *waiting = palloc(sizeof(bool) * n);
	WakeNode  **wns = palloc(sizeof(WakeNode *) * n);

	for (;;)
	{
		ListCell   *lc;
		int			nwait = 0;
		int			i;

		foreach(lc, conn->wake_nodes)
		{
			WakeNode   *wn = (WakeNode *) lfirst(lc);

			if (wn->in_wait && awaits_answer(wn))
			{
				wns[nwait] = wn;
				nodes[nwait] = wn->node;
				waiting[nwait++] = true;
			}
		}
		if (nwait == 0)
			break;
		if (node_wait(nodes, waiting, nwait, until, ERROR) <= 0)
		{
			for (i = 0; i < nwait; i++)
				forget_subscriptions(wns[i]);
			break;
		}
		for (i = 0; i < nwait; i++)
			read_replies(wns[i]);
	}
	pfree(nodes);
	pfree(waiting);
	pfree(wns);
}

/*
 * Connect a node's subscription connection and ask, before it subscribes,
 * whether its server publishes keyspace events (an ACL that denies CONFIG
 * counts as no).
 */
static void
connect_wake_node(WakeNode *wn)
{
	forget_subscriptions(wn);
	redis_open_node(wn->node);
	append_command(wn, "CONFIG", "GET", 3, "notify-keyspace-events", 22);
	if (send_commands(wn))
		wn->keyspace_events = KEYSPACE_ASKED;
}

/* Subscribe a connected node to the channels that a wait listens to */
static void
subscribe_node(WakeNode *wn, const char *key, int keylen,
			   const char *channel, int channellen)
{
	RedisConn  *conn = wn->node->conn;
	int			nexpected = 0;
	bool		same = wn->channel != NULL && wn->channellen == channellen &&
		memcmp(wn->channel, channel, channellen) == 0;

	if (!same && !wn->refused)
	{
		if (wn->channel != NULL)
		{
			append_command(wn, wn->sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE",
						   wn->channel, wn->channellen, NULL, 0);
			pfree(wn->channel);
		}
		wn->channel = MemoryContextAlloc(conn->cxt, channellen);
		memcpy(wn->channel, channel, channellen);
		wn->channellen = channellen;
		append_command(wn, wn->sharded ? "SSUBSCRIBE" : "SUBSCRIBE",
					   channel, channellen, NULL, 0);
		wn->expected[nexpected++] = EXPECT_WAKE;
	}
	if (wn->keyspace_events == KEYSPACE_ON && wn->keyspace == NULL)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(conn->cxt);

		wn->keyspace = redis_keyspace_channel(conn->database, key, keylen,
											  &wn->keyspacelen);
		MemoryContextSwitchTo(oldcxt);
		append_command(wn, "SUBSCRIBE", wn->keyspace, wn->keyspacelen,
					   NULL, 0);
		wn->expected[nexpected++] = EXPECT_KEYSPACE;
	}
	if (nexpected > 0)
		(void) send_commands(wn);
}

/*
 * Subscribe to what wakes a wait for key: our releases on channel, the
 * waiter's own, and keyspace events where the server publishes them; on
 * the node that serves key, or on every master of a Redlock server.  Waits
 * for the confirmations, so that a release after this returns is heard.
 * Returns what the wait hears (WAKE_ANNOUNCED, WAKE_KEYSPACE), as far as
 * every node it listens to does.
 */
int
wake_subscribe(RedisConn *conn, const char *key, int keylen,
			   const char *channel, int channellen, RedisDeadline deadline)
{
	ListCell   *lc;
	int			hears = WAKE_ANNOUNCED | WAKE_KEYSPACE;

	if (mark_wait_nodes(conn, key, keylen) == 0)
		return 0;
	foreach(lc, conn->wake_nodes)
	{
		WakeNode   *wn = (WakeNode *) lfirst(lc);

		if (!wn->in_wait)
			continue;
		/* what came while it was idle is stale; a peer may have closed it */
		read_replies(wn);
		if (!node_is_connected(wn->node))
			connect_wake_node(wn);
	}
	/* the keyspace answer decides what to subscribe to */
	await_answers(conn, deadline);
	foreach(lc, conn->wake_nodes)
	{
		WakeNode   *wn = (WakeNode *) lfirst(lc);

		if (wn->in_wait && node_is_connected(wn->node))
			subscribe_node(wn, key, keylen, channel, channellen);
	}
	await_answers(conn, deadline);
	foreach(lc, conn->wake_nodes)
	{
		WakeNode   *wn = (WakeNode *) lfirst(lc);

		if (!wn->in_wait)
			continue;
		if (!node_is_connected(wn->node) || wn->channel == NULL)
			hears &= ~WAKE_ANNOUNCED;
		if (!node_is_connected(wn->node) || wn->keyspace == NULL)
			hears &= ~WAKE_KEYSPACE;
		/* what came before the subscriptions were confirmed is stale */
		wn->heard = false;
	}
	return hears;
}

/* Has a node of the current wait heard a release?  Forget it if so */
static bool
take_heard(RedisConn *conn)
{
	ListCell   *lc;
	bool		heard = false;

	foreach(lc, conn->wake_nodes)
	{
		WakeNode   *wn = (WakeNode *) lfirst(lc);

		if (wn->in_wait && wn->heard)
			heard = true;
		wn->heard = false;
	}
	return heard;
}

/*
 * The wait set of a wait: a single node's own (latch, postmaster death,
 * socket), that node in *only_out, or one made for several, which the
 * caller frees (*made); NULL when no node is connected.
 */
static WaitEventSet *
wake_wait_set(RedisConn *conn, bool *made, WakeNode **only_out)
{
	ListCell   *lc;
	WakeNode   *only = NULL;
	int			n = 0;
	WaitEventSet *set;

	foreach(lc, conn->wake_nodes)
	{
		WakeNode   *wn = (WakeNode *) lfirst(lc);

		if (wn->in_wait && node_is_connected(wn->node))
		{
			only = wn;
			n++;
		}
	}
	*made = n > 1;
	*only_out = only;
	if (n == 0)
		return NULL;
	if (n == 1)
	{
		RedisNode  *node = only->node;

		if (node->waitset_events != WL_SOCKET_READABLE)
		{
			ModifyWaitEvent(node->waitset, node->waitset_socket_pos,
							WL_SOCKET_READABLE, NULL);
			node->waitset_events = WL_SOCKET_READABLE;
		}
		return node->waitset;
	}
	set = node_wait_set_create(false, n);
	foreach(lc, conn->wake_nodes)
	{
		WakeNode   *wn = (WakeNode *) lfirst(lc);

		if (wn->in_wait && node_is_connected(wn->node))
			AddWaitEventToSet(set, WL_SOCKET_READABLE, wn->node->sock, NULL,
							  wn);
	}
	return set;
}

/*
 * Wait up to timeout_ms for a release of the lock awaited, on the
 * subscriptions of the current wait (a plain sleep without any).  When
 * holder_announces, the holder is one of ours, whose DEL is announced on
 * the wake channel: its keyspace event then wakes nobody, so that a
 * release still wakes one waiter.  The latch ends the wait too, after
 * interrupts are served (cancel and timeouts throw from here).
 */
WakeCause
wake_wait(RedisConn *conn, long timeout_ms, bool holder_announces)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   timeout_ms);
	WaitEventSet *volatile made = NULL;
	WaitEventSet *set;
	bool		made_here;
	WakeNode   *only;
	WakeCause	cause = WAKE_TIMEOUT;
	ListCell   *lc;

	foreach(lc, conn->wake_nodes)
	{
		WakeNode   *wn = (WakeNode *) lfirst(lc);

		wn->holder_announces = holder_announces;
		if (wn->in_wait)
			read_replies(wn);
	}
	if (take_heard(conn))
		return WAKE_RELEASED;

	set = wake_wait_set(conn, &made_here, &only);
	if (made_here)
		made = set;
	PG_TRY();
	{
		for (;;)
		{
			WaitEvent	events[8];
			int			nevents;
			int			i;
			long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
															   deadline);

			if (left <= 0)
				break;
			if (set == NULL)
				nevents = (WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT |
									 WL_EXIT_ON_PM_DEATH, left,
									 redislock_wait_event()) & WL_LATCH_SET) ?
					-1 : 0;
			else
				nevents = WaitEventSetWait(set, left, events,
										   lengthof(events),
										   redislock_wait_event());
			for (i = 0; i < nevents; i++)
			{
				if (events[i].events & WL_LATCH_SET)
					nevents = -1;
				else if (events[i].events & WL_SOCKET_READABLE)
					read_replies(made != NULL ?
								 (WakeNode *) events[i].user_data : only);
			}
			if (nevents < 0)
			{
				ResetLatch(MyLatch);
				CHECK_FOR_INTERRUPTS();
				cause = WAKE_LATCH;
				break;
			}
			if (take_heard(conn))
			{
				cause = WAKE_RELEASED;
				break;
			}
		}
	}
	PG_FINALLY();
	{
		if (made != NULL)
			FreeWaitEventSet(made);
	}
	PG_END_TRY();
	return cause;
}

/*
 * A wait ended.  Its keyspace channels are left, as they carry every change
 * of the key; a waiter that got the lock stays subscribed to its wake
 * channel for the next wait, since taking the lock took it out of the
 * queue; one that gave up unsubscribes, so that no release wakes it while
 * it does not wait.  Nothing is waited for: the confirmations are dropped
 * when next read.
 */
void
wake_end(RedisConn *conn, bool granted)
{
	ListCell   *lc;

	foreach(lc, conn->wake_nodes)
	{
		WakeNode   *wn = (WakeNode *) lfirst(lc);
		bool		sent = false;

		if (!wn->in_wait || !node_is_connected(wn->node))
			continue;
		wn->in_wait = false;
		if (wn->keyspace != NULL)
		{
			append_command(wn, "UNSUBSCRIBE", wn->keyspace, wn->keyspacelen,
						   NULL, 0);
			pfree(wn->keyspace);
			wn->keyspace = NULL;
			sent = true;
		}
		if (!granted && wn->channel != NULL)
		{
			append_command(wn, wn->sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE",
						   wn->channel, wn->channellen, NULL, 0);
			pfree(wn->channel);
			wn->channel = NULL;
			sent = true;
		}
		if (sent)
			(void) send_commands(wn);
	}
}

/*
 * Close the subscriptions of a server's connection entry after an error in
 * a wait, when a release announced to a waiter that no longer waits would
 * wake nobody.  The next wait connects again; the entry closes the
 * connections for good with its other ones.
 */
void
wake_close(RedisConn *conn)
{
	ListCell   *lc;

	foreach(lc, conn->wake_nodes)
		forget_subscriptions((WakeNode *) lfirst(lc));
}
