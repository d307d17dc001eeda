/*-------------------------------------------------------------------------
 *
 * cleanup.c
 *		Calls whose replies nobody waits for: clean-up, and what is kept
 *		for a node until it connects again.
 *
 * Some calls are sent and never waited for: their replies are read and
 * dropped at the connection's next use.  The clears of a committed
 * decrement's records are held back and go out with the next command to
 * their node (node_hold_hdel()), or inside it: a script call that deletes
 * fields of the same hash anyway carries them (RedisCall.carries_hdels_of),
 * so that Redis runs one command where it would run two.  The release of a
 * lock that an acquire may have left behind though it is not taken goes
 * out the same way, and so do the calls of a transaction end for a node
 * that still owes the reply of a call that timed out (batch.c).  A cluster
 * may answer such a command MOVED or ASK, so it is kept until its reply
 * comes, and sent on where the reply says.  Clean-up for a node that is not
 * connected is kept and sent first thing once it is.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "utils/memutils.h"

#include "calls/calls.h"

/*
 * Clean-up sent after commit to a cluster node, kept until its reply comes:
 * a slot that moved, or is moving, answers MOVED or ASK, and the clean-up
 * is then sent where that says.
 */
typedef struct RedirectableCall
{
	uint64		seq;			/* its number among the node's commands */
	RedisCall	call;			/* argv copied in the same allocation */
} RedirectableCall;

/*
 * A copy of call, with its arguments, in TopMemoryContext.  The arguments
 * of a call on many keys that the call itself has no room for (argv_more)
 * go in the same allocation, their pointers first.
 */
static RedirectableCall *
copy_cleanup(const RedisCall *call)
{
	int			nmore = Max(call->argc - REDIS_CALL_MAX_ARGS, 0);
	Size		size = sizeof(RedirectableCall) +
		nmore * (sizeof(char *) + sizeof(size_t));
	RedirectableCall *kept;
	char	   *strings;
	int			i;

	for (i = 0; i < call->argc; i++)
	{
		size_t		len;

		(void) redis_call_argv(call, i, &len);
		size += len;
	}
	kept = MemoryContextAlloc(TopMemoryContext, size);
	kept->seq = 0;
	kept->call = *call;
	kept->call.reply_type = 0;	/* any reply it had is not kept */
	kept->call.str = NULL;
	kept->call.parts = NULL;	/* nor anything its reply was for */
	kept->call.nparts = 0;
	kept->call.argc = 0;
	kept->call.argv_more = nmore > 0 ? (const char **) (kept + 1) : NULL;
	kept->call.argvlen_more = nmore > 0 ?
		(size_t *) (kept->call.argv_more + nmore) : NULL;
	kept->call.maxargs_more = nmore;
	strings = (char *) (kept + 1) + nmore * (sizeof(char *) + sizeof(size_t));
	for (i = 0; i < call->argc; i++)
	{
		size_t		len;
		const char *arg = redis_call_argv(call, i, &len);

		if (arg != NULL)
		{
			memcpy(strings, arg, len);
			arg = strings;
			strings += len;
		}
		redis_call_arg(&kept->call, arg, len);
	}
	return kept;
}

/* Append kept to a list kept in TopMemoryContext */
static List *
lappend_kept(List *list, RedirectableCall *kept)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopMemoryContext);

	list = lappend(list, kept);
	MemoryContextSwitchTo(oldcxt);
	return list;
}

/*
 * Append clean-up to its node's output, preceded by ASKING if it follows
 * an ASK redirection, and keep a copy of it if a cluster may redirect it
 */
static void
append_cleanup(RedisNode *node, const RedisCall *call)
{
	if (call->asking)
	{
		RedisCall	asking;

		redis_call_init(&asking, call->conn, NULL);
		redis_call_arg(&asking, "ASKING", 6);
		node_append_unwaited(node, &asking);
	}
	node_append_unwaited(node, call);
	if (call->conn->topology->follow_redirect != NULL)
	{
		RedirectableCall *kept = copy_cleanup(call);

		kept->seq = node->sent - 1;
		node->redirectable = lappend_kept(node->redirectable, kept);
	}
}

/*
 * Ask a node just connected what server it is (HELLO, in RESP2, the
 * protocol of every other call), ahead of the calls it was connected for:
 * the reply, which nobody waits for, is noted when it is dropped.  It costs
 * no round trip of its own, and a server that does not answer it, or does
 * not know it, fails nothing.
 */
void
redis_send_hello(RedisNode *node)
{
	RedisCall	hello;

	redis_call_init(&hello, node->conn, NULL);
	redis_call_arg(&hello, "HELLO", 5);
	redis_call_arg(&hello, "2", 1);
	node_append_unwaited(node, &hello);
	node->hello_seq = node->sent - 1;
	node->standalone = false;	/* until the reply says so again */
}

/*
 * Send a call whose reply nobody waits for, after what is held back for
 * its node.  Clean-up for a node that is not connected is kept and sent
 * first thing once it is (Redis runs it before anything that this backend
 * sends after it), so that a release "on every master, answered or not"
 * also reaches a master whose connection closed.  Clean-up for a node that
 * failed during this end is dropped: what it would clean up is found again
 * later, or ends with its lease.
 */
void
redis_send_cleanup(RedisCall *call, uint64 end_id)
{
	RedisNode  *node = call->node;

	/* a Sentinel server whose master is not known yet */
	if (node->is_sentinel || (end_id != 0 && node->failed_end == end_id))
		return;
	if (!node_is_connected(node))
	{
		node->queued_cleanup = lappend_kept(node->queued_cleanup,
											copy_cleanup(call));
		return;
	}
	redis_release_held(node, NULL, 0);
	append_cleanup(node, call);

	/* a broken connection is found, and closed, by the node's next run */
	(void) node_flush(node);
}

/*
 * Hold back the clear of a record, the HDEL of field (fieldlen bytes) from
 * the hash key, for the node that serves key as last known: it goes out
 * with the next command to the node, in the same write, and costs neither
 * a system call nor a read of Redis's of its own (node_hold_hdel() says why
 * that may be lost), or inside that command, when it is a call that
 * carries the HDELs of key.  It is kept as its key and field only, so that
 * holding it costs a commit next to nothing.  A clear for a node that is
 * not connected is sent as other clean-up is.
 */
void
redis_hold_hdel(RedisConn *conn, const char *key, int keylen,
				const char *field, int fieldlen)
{
	RedisNode  *node = redis_key_node(conn, key, keylen);

	if (!node_is_connected(node) || node->is_sentinel)
	{
		RedisCall	call;

		redis_call_hdel(&call, conn, key, keylen, field, fieldlen);
		redis_call_on_node(&call, node);
		redis_send_cleanup(&call, 0);
		return;
	}
	node_hold_hdel(node, key, keylen, field, fieldlen);
}

/*
 * Does a held HDEL delete a field of the hash that call carries HDELs of,
 * and has call room for the field?
 */
static bool
can_carry(const RedisCall *call, const HeldHdel *held)
{
	int			keyarg = call->carries_hdels_of - 1;

	return call->argc < REDIS_CALL_MAX_ARGS &&
		held->keylen == call->argvlen[keyarg] &&
		memcmp(held->data, call->argv[keyarg], held->keylen) == 0;
}

/*
 * Put the clears held back for node (redis_hold_hdel()) into its output,
 * ahead of calls that are about to be sent there, or into those calls: a
 * call that carries the HDELs of a hash takes, as its last arguments, the
 * fields that held HDELs would delete from it (copied into the current
 * memory context, so that the call can be sent again).
 */
void
redis_release_held(RedisNode *node, RedisCall **calls, int ncalls)
{
	List	   *held = node_take_held(node);
	ListCell   *lc;
	int			i;

	foreach(lc, held)
	{
		HeldHdel   *hdel = lfirst(lc);
		const char *field = hdel->data + hdel->keylen;

		for (i = 0; i < ncalls; i++)
			if (calls[i]->carries_hdels_of > 0 && can_carry(calls[i], hdel))
				break;
		if (i < ncalls)
			redis_call_arg(calls[i], pnstrdup(field, hdel->fieldlen),
						   hdel->fieldlen);
		else
		{
			RedisCall	call;

			redis_call_hdel(&call, node->conn, hdel->data, hdel->keylen, field,
					  hdel->fieldlen);
			append_cleanup(node, &call);
		}
		pfree(hdel);
	}
	list_free(held);
}

/* Send the clean-up kept for node while it was not connected */
void
redis_send_queued_cleanup(RedisNode *node)
{
	while (node->queued_cleanup != NIL && node_is_connected(node))
	{
		RedirectableCall *kept = linitial(node->queued_cleanup);

		node->queued_cleanup = list_delete_first(node->queued_cleanup);
		redis_send_cleanup(&kept->call, 0);
		pfree(kept);
	}
}

/*
 * Drop a reply that nobody waits for.  If it redirects clean-up sent after
 * commit, the clean-up goes where the redirection says; if it answers the
 * HELLO sent after connecting, what the server is is noted.
 */
void
redis_drop_reply(RedisNode *node, redisReply *reply)
{
	uint64		seq = node->sent - node->awaiting;
	RedirectableCall *kept = NULL;

	node->awaiting--;
	if (seq == node->hello_seq)
		redis_note_hello(node, reply);
	while (node->redirectable != NIL)
	{
		kept = linitial(node->redirectable);
		if (kept->seq > seq)
		{
			kept = NULL;
			break;
		}
		node->redirectable = list_delete_first(node->redirectable);
		if (kept->seq == seq)
			break;
		pfree(kept);			/* its reply went by unseen */
		kept = NULL;
	}
	if (kept != NULL && reply->type == REDIS_REPLY_ERROR)
	{
		kept->call.reply_type = reply->type;
		kept->call.str = pnstrdup(reply->str, reply->len);
		kept->call.len = reply->len;
		if (redis_follow_redirect(&kept->call) && kept->call.node != node)
			redis_send_cleanup(&kept->call, 0);
	}
	if (kept != NULL)
		pfree(kept);
	freeReplyObject(reply);
}

/*
 * Send calls whose replies nobody waits for (clean-up after commit): they
 * cost no round trip now, and their replies are dropped when the node is
 * next used.  Calls go where the server's last known map or master says,
 * without asking; those a cluster redirects are sent again when the
 * redirection is read.
 */
void
redis_send_deferred(RedisCall *calls, int ncalls)
{
	int			npending;
	RedisCall **pending = redis_expand_calls(calls, ncalls, &npending);
	int			i;

	redis_route_calls(pending, npending);
	for (i = 0; i < npending; i++)
		redis_send_cleanup(pending[i], 0);
	for (i = 0; i < ncalls; i++)
		calls[i].quorum = NULL;
	pfree(pending);
}
