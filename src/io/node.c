/*-------------------------------------------------------------------------
 *
 * node.c
 *		One socket to one Redis node, and the wait over any number of
 *		them.
 *
 * Writes never block: they go out as far as the kernel takes them.  Reads
 * take what has arrived and feed hiredis' reader.  Waiting is against an
 * absolute deadline, and wakes for query cancel, statement_timeout and
 * termination, which SQL functions service on the spot.  Transaction-end
 * callbacks run with interrupts held: there a wait gives up when the
 * backend is asked to terminate, as the leases make up for what it leaves
 * undone.
 *
 * A wait for the replies of one node, the common case, is a read of its
 * socket that blocks for at most RECEIVE_SLICE_MS: one system call where a
 * wait on the latch machinery takes two (epoll_wait, then the read), and
 * the kernel wakes a reader more cheaply than an epoll waiter.  The socket
 * has a receive timeout, so the signals that carry cancel, timeouts and
 * termination end the read with EINTR whatever SA_RESTART says; a signal
 * that comes between the check of the latch and the read is seen when the
 * slice ends.  Waits over several nodes, waits to write, and the last
 * slice before a deadline use the latch machinery.
 *
 * Clean-up that nobody waits for may be held back for a node (see
 * node_hold_hdel()): it then costs no system call of its own, and goes out
 * with the next write to the node, or in the next command that can carry
 * it, or when the node is closed or the backend exits.
 *
 * Connecting is socket.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"
#include "utils/memutils.h"

#include "guc.h"
#include "io/io.h"

/* A command buffer that grew beyond this is given back once written */
#define OUT_BUFFER_KEEP		(64 * 1024)

/* Bytes read from a socket at a time */
#define RECEIVE_CHUNK		(16 * 1024)

static bool receive_from(RedisNode *node, int flags, bool *closed, bool *got);
static void write_held(RedisNode *node);

/* The nodes whose output holds commands back (node_hold_hdel()) */
static dlist_head holding_nodes = DLIST_STATIC_INIT(holding_nodes);

/* Nodes a shared wait set is kept for (a Redlock server's masters, say) */
#define SHARED_WAIT_NODES	8

/*
 * The wait set of the last wait over several nodes, kept for the next one
 * over the same nodes: making one costs a system call per socket.  A node
 * that disconnects leaves it.
 */
static struct
{
	WaitEventSet *set;
	int			nnodes;
	RedisNode  *nodes[SHARED_WAIT_NODES];
	int			pos[SHARED_WAIT_NODES];
	uint32		events[SHARED_WAIT_NODES];
} shared_wait;

/* The socket events a node waits for */
static uint32
wanted_events(const RedisNode *node)
{
	if (node->out_sent < node->out.len)
		return WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE;
	return WL_SOCKET_READABLE;
}

/* Forget the shared wait set, if node is in it */
static void
leave_shared_wait(const RedisNode *node)
{
	int			i;

	for (i = 0; i < shared_wait.nnodes; i++)
	{
		if (shared_wait.nodes[i] != node)
			continue;
		FreeWaitEventSet(shared_wait.set);
		shared_wait.set = NULL;
		shared_wait.nnodes = 0;
		return;
	}
}

/*
 * The wait set for a wait over several nodes: the shared one when it was
 * made for the same nodes, else a new one, kept for next time when the
 * nodes are few enough and all connected.  *made_here says whether the
 * caller must free it.
 */
static WaitEventSet *
wait_set_for(RedisNode **nodes, int nnodes, bool *made_here)
{
	WaitEventSet *set;
	bool		keep = nnodes <= SHARED_WAIT_NODES;
	int			i;

	for (i = 0; i < nnodes; i++)
		if (!node_is_connected(nodes[i]))
			keep = false;

	*made_here = false;
	if (shared_wait.set != NULL && shared_wait.nnodes == nnodes &&
		memcmp(shared_wait.nodes, nodes, sizeof(RedisNode *) * nnodes) == 0)
	{
		for (i = 0; i < nnodes; i++)
		{
			uint32		wanted = wanted_events(nodes[i]);

			if (wanted != shared_wait.events[i])
			{
				ModifyWaitEvent(shared_wait.set, shared_wait.pos[i], wanted,
								NULL);
				shared_wait.events[i] = wanted;
			}
		}
		return shared_wait.set;
	}

	if (keep && shared_wait.set != NULL)
	{
		FreeWaitEventSet(shared_wait.set);
		shared_wait.set = NULL;
		shared_wait.nnodes = 0;
	}
	set = node_wait_set_create(keep, nnodes);
	for (i = 0; i < nnodes; i++)
	{
		uint32		wanted;
		int			pos;

		if (!node_is_connected(nodes[i]))
			continue;
		wanted = wanted_events(nodes[i]);
		pos = AddWaitEventToSet(set, wanted, nodes[i]->sock, NULL, nodes[i]);
		if (keep)
		{
			shared_wait.nodes[i] = nodes[i];
			shared_wait.pos[i] = pos;
			shared_wait.events[i] = wanted;
		}
	}
	if (keep)
	{
		shared_wait.set = set;
		shared_wait.nnodes = nnodes;
	}
	else
		*made_here = true;
	return set;
}

/*
 * Bytes that came on a node nobody waits on now (late replies) are taken
 * into its reader at once, so that its socket does not keep the wait
 * awake; they are read in order when the node is next used.  A node whose
 * stream ended or failed is closed: nothing of it is waited for.  False
 * then.
 */
static bool
take_in_early(RedisNode *node)
{
	bool		closed;

	if (node_receive(node, &closed))
		return true;
	node_disconnect(node);
	return false;
}

/*
 * Wait for the replies of one node by reading its socket (see the header
 * comment) until something came, the peer closed or failed, or the
 * deadline is within a slice.  Returns 1 when node_receive() has something
 * to report, -1 when the wait was given up for a termination request, and
 * 0 when the rest is left to the latch machinery.
 */
static int
read_waiting(RedisNode *node, TimestampTz deadline, int elevel)
{
	for (;;)
	{
		bool		ok;
		bool		closed;
		bool		got;

		if (MyLatch->is_set && !node_serve_interrupts(elevel))
			return -1;
		if (node_ms_until(deadline) <= RECEIVE_SLICE_MS)
			return 0;
		pgstat_report_wait_start(redislock_wait_event());
		ok = receive_from(node, 0, &closed, &got);
		pgstat_report_wait_end();
		if (ok && !got)
		{
			if (!PostmasterIsAlive())
				proc_exit(1);
			continue;
		}
		node->read_in_wait = true;
		node->read_ok = ok;
		node->read_closed = closed;
		node->read_errno = errno;
		return 1;
	}
}

/*
 * Wait until one of the nodes that waiting[] marks can make progress:
 * readable when it awaits replies, writable when it has bytes to write.
 * Returns the number of nodes that can, 0 when the deadline passed, -1
 * when the wait was given up for a termination request.  A single node
 * waits on its own set, made when it connected; several share a set kept
 * for the same nodes, all of them, so that the set stays the same while
 * some finish.  A set made for this wait alone is freed however the wait
 * ends, a cancel or timeout thrown by interrupt service included: it holds
 * a descriptor, and a wait set is no resource that an abort releases.
 */
int
node_wait(RedisNode **nodes, const bool *waiting, int nnodes,
		  TimestampTz deadline, int elevel)
{
	WaitEventSet *set = NULL;
	WaitEventSet *volatile made = NULL;
	WaitEvent	events[8];
	int			nready = 0;
	int			i;

	if (nnodes == 1)
	{
		RedisNode  *node = nodes[0];
		uint32		wanted = wanted_events(node);

		if (wanted == WL_SOCKET_READABLE)
		{
			int			nread = read_waiting(node, deadline, elevel);

			if (nread != 0)
				return nread;
		}
		if (wanted != node->waitset_events)
		{
			ModifyWaitEvent(node->waitset, node->waitset_socket_pos, wanted,
							NULL);
			node->waitset_events = wanted;
		}
		set = node->waitset;
	}

	PG_TRY();
	{
		for (;;)
		{
			long		timeout = node_ms_until(deadline);
			int			nevents;
			bool		closed_one = false;

			if (timeout <= 0)
				break;
			if (set == NULL)
			{
				bool		made_here;

				set = wait_set_for(nodes, nnodes, &made_here);
				if (made_here)
					made = set;
			}
			nevents = WaitEventSetWait(set, timeout, events, lengthof(events),
									   redislock_wait_event());
			for (i = 0; i < nevents; i++)
			{
				if (events[i].events & WL_LATCH_SET)
				{
					if (!node_serve_interrupts(elevel))
					{
						nready = -1;
						break;
					}
				}
				else if (events[i].events & WL_SOCKET_MASK)
				{
					RedisNode  *node = nnodes == 1 ? nodes[0] :
						(RedisNode *) events[i].user_data;
					int			n;

					for (n = 0; nodes[n] != node; n++)
						;
					if (waiting[n])
						nready++;
					else if (!take_in_early(node))
						closed_one = true;
				}
			}
			if (nready != 0)
				break;
			if (closed_one)
			{
				/* the closed node left the shared set; wait on the others */
				if (made != NULL)
					FreeWaitEventSet(made);
				made = NULL;
				set = NULL;
			}
		}
	}
	PG_FINALLY();
	{
		if (made != NULL)
			FreeWaitEventSet(made);
	}
	PG_END_TRY();
	return nready;
}

/*
 * Remember why a connect failed.  Connect failures are reported by the
 * caller, which may first try another node of the same server.
 */
void
node_set_connect_error(RedisNode *node, const char *reason)
{
	node->connect_sqlstate = ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION;
	if (node->connect_error != NULL)
		pfree(node->connect_error);
	node->connect_error = MemoryContextStrdup(TopMemoryContext, reason);
}

/* Report the last connect failure of the node at elevel */
void
node_report_connect_failure(const RedisNode *node, int elevel)
{
	ereport(elevel,
			(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
			 errmsg("could not connect to Redis server \"%s\"",
					node->conn->servername),
			 errdetail("Connection to %s failed: %s.", node->endpoint,
					   node->connect_error ? node->connect_error : "unknown error"),
			 errhint("Check that Redis is running and that the options of foreign server \"%s\" are right.",
					 node->conn->servername)));
}

/*
 * A new, disconnected node of conn, in conn's memory.  host is NULL for a
 * Unix socket.
 */
RedisNode *
node_create(struct RedisConn *conn, const char *host, int port,
			const char *unix_socket)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(conn->cxt);
	RedisNode  *node = palloc0(sizeof(RedisNode));

	node->conn = conn;
	node->role = "unknown";
	node->sock = PGINVALID_SOCKET;
	node->port = port;
	if (unix_socket != NULL)
	{
		node->unix_socket = pstrdup(unix_socket);
		node->endpoint = node->unix_socket;
	}
	else
	{
		node->host = pstrdup(host);
		node->endpoint = strchr(host, ':') != NULL ?
			psprintf("[%s]:%d", host, port) : psprintf("%s:%d", host, port);
	}
	MemoryContextSwitchTo(oldcxt);
	return node;
}

/*
 * Make sure the node has a command buffer, and give back one that a large
 * command made large, so that one big key does not keep its memory for the
 * rest of the session.  hiredis' reader frees its own large buffer once it
 * has been consumed.
 */
static void
node_release_buffers(RedisNode *node)
{
	MemoryContext oldcxt;

	if (node->out.data != NULL &&
		(node->out.maxlen <= OUT_BUFFER_KEEP || node->out.len > 0))
		return;
	if (node->out.data != NULL)
		pfree(node->out.data);
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	initStringInfo(&node->out);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Connect the node: a socket, its wait set and a reader.  The handshake
 * (AUTH, SELECT) is the caller's.  Returns false when that fails, with the
 * reason kept for node_report_connect_failure(); elevel says only whether
 * interrupts are served while waiting.
 */
bool
node_connect(RedisNode *node, TimestampTz deadline, int elevel)
{
	int			err;
	const char *reason;

	Assert(node->sock == PGINVALID_SOCKET);
	if (!node_open_socket(node, deadline, elevel, &err, &reason))
	{
		if (reason == NULL)
			reason = err != 0 ? strerror(err) :
				psprintf("timed out after %d ms", redislock_connect_timeout);
		node_set_connect_error(node, reason);
		return false;
	}

	if (node->connect_error != NULL)
		pfree(node->connect_error);
	node->connect_error = NULL;
	Assert(node->held == NIL);
	node->reader = redisReaderCreate();
	node->awaiting = 0;
	node->deferred = 0;
	node->sent = 0;
	node->hello_seq = PG_UINT64_MAX;
	node->out_sent = 0;
	node_release_buffers(node);
	resetStringInfo(&node->out);
	return true;
}

/*
 * Close the socket.  Replies still on their way are lost with it, so the
 * caller must have settled what they were for.  Commands held back are
 * written first, as far as the kernel takes them; on a connection that
 * failed they are lost, which is harmless (see node_hold_hdel()).
 */
void
node_disconnect(RedisNode *node)
{
	if (node->sock == PGINVALID_SOCKET)
		return;
	if (node->held != NIL)
	{
		write_held(node);
		(void) node_flush(node);
	}
	leave_shared_wait(node);
	FreeWaitEventSet(node->waitset);
	node->waitset = NULL;
	redisReaderFree(node->reader);
	node->reader = NULL;
	closesocket(node->sock);
	node->sock = PGINVALID_SOCKET;
	ReleaseExternalFD();
	node->checked = false;
	node->read_in_wait = false;
	node->awaiting = 0;
	node->deferred = 0;
	list_free_deep(node->redirectable);
	node->redirectable = NIL;
	node->out_sent = 0;
	if (node->out.data != NULL)
		resetStringInfo(&node->out);
	node_release_buffers(node);
}

/* Close the node and free what it keeps outside its server's memory */
void
node_destroy(RedisNode *node)
{
	node_disconnect(node);
	if (node->out.data != NULL)
		pfree(node->out.data);
	node->out.data = NULL;
	if (node->connect_error != NULL)
		pfree(node->connect_error);
	node->connect_error = NULL;
	list_free_deep(node->queued_cleanup);
	node->queued_cleanup = NIL;
}

bool
node_is_connected(const RedisNode *node)
{
	return node->sock != PGINVALID_SOCKET;
}

/*
 * Has the peer closed a connection that carries nothing of ours?  Redis
 * closes idle clients (its timeout setting), restarts and CLIENT KILL do
 * too, and a NAT may drop an idle flow: the socket tells, without a round
 * trip.  Bytes that nobody asked for mean the stream cannot be trusted
 * either.
 */
bool
node_peer_closed(RedisNode *node)
{
	char		c;
	ssize_t		n;

	if (node->awaiting > 0)
		return false;
	n = recv(node->sock, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
					   errno == EINTR));
}

/*
 * Hold back the HDEL of field from the hash key for the node, which nobody
 * waits for, kept as its key and field (in TopMemoryContext): it is
 * encoded and goes out ahead of the next write to the node, in the same
 * system call, and Redis reads it with what follows in one read; or a
 * command of the next write carries it (calls/cleanup.c says which).  That
 * is for clean-up whose delay costs nothing but a record kept a little
 * longer.  A held command may be lost, when the connection fails or the
 * peer has closed it before the next write, so it must be one whose loss
 * is made good otherwise: a decrement's record that is not cleared stays
 * beside its committed row, and redis_stock_recover() clears it.
 */
void
node_hold_hdel(RedisNode *node, const char *key, int keylen,
			   const char *field, int fieldlen)
{
	HeldHdel   *held = MemoryContextAlloc(TopMemoryContext,
										  offsetof(HeldHdel, data) +
										  keylen + fieldlen);
	MemoryContext oldcxt;

	Assert(node_is_connected(node));
	held->keylen = keylen;
	held->fieldlen = fieldlen;
	memcpy(held->data, key, keylen);
	memcpy(held->data + keylen, field, fieldlen);
	if (node->held == NIL)
		dlist_push_tail(&holding_nodes, &node->held_link);
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	node->held = lappend(node->held, held);
	MemoryContextSwitchTo(oldcxt);
}

/* Take the commands held back for the node, which holds none after */
List *
node_take_held(RedisNode *node)
{
	List	   *held = node->held;

	if (held != NIL)
	{
		node->held = NIL;
		dlist_delete(&node->held_link);
	}
	return held;
}

/* Append a command whose reply nobody waits for to the node's output */
void
node_append_unwaited(RedisNode *node, const RedisCall *call)
{
	resp_append_call(&node->out, call);
	node->awaiting++;
	node->sent++;
	redis_count(node->conn, REDIS_STAT_CALLS, 1);
}

/*
 * Put the HDELs held back for the node into its output, for a node about
 * to be closed or a backend about to exit: nothing will read their
 * replies, so no command carries them and a cluster's redirection of them
 * is not followed.
 */
static void
write_held(RedisNode *node)
{
	List	   *held = node_take_held(node);
	ListCell   *lc;

	foreach(lc, held)
	{
		HeldHdel   *hdel = lfirst(lc);
		RedisCall	call;

		redis_call_hdel(&call, node->conn, hdel->data, hdel->keylen,
						hdel->data + hdel->keylen, hdel->fieldlen);
		node_append_unwaited(node, &call);
		pfree(hdel);
	}
	list_free(held);
}

/*
 * Write what every node holds back, as far as the kernel takes it, at
 * backend exit: the replies are not read.
 */
void
node_flush_held(void)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &holding_nodes)
	{
		RedisNode  *node = dlist_container(RedisNode, held_link, iter.cur);

		write_held(node);
		(void) node_flush(node);
	}
}

/*
 * Write what the kernel takes of the pending commands.  Returns false on
 * an I/O error (errno set).
 */
bool
node_flush(RedisNode *node)
{
	while (node->out_sent < node->out.len)
	{
		ssize_t		n = send(node->sock, node->out.data + node->out_sent,
							 node->out.len - node->out_sent,
							 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0)
		{
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK;
		}
		node->out_sent += n;
	}
	node->out_sent = 0;
	resetStringInfo(&node->out);
	node_release_buffers(node);
	return true;
}

/*
 * Read into the reader until a read comes short.  With flags 0 the first
 * read waits for data, for at most the socket's receive timeout; with
 * MSG_DONTWAIT none does.  *got says whether anything came.  Returns false
 * on an I/O error (errno set) or, with *closed set, when the peer closed
 * the connection.
 */
static bool
receive_from(RedisNode *node, int flags, bool *closed, bool *got)
{
	char		buf[RECEIVE_CHUNK];

	*closed = false;
	*got = false;
	for (;;)
	{
		ssize_t		n = recv(node->sock, buf, sizeof(buf), flags);

		if (n > 0)
		{
			*got = true;
			if (redisReaderFeed(node->reader, buf, n) != REDIS_OK)
				return false;
			if (n < (ssize_t) sizeof(buf))
				return true;
			flags = MSG_DONTWAIT;
			continue;
		}
		if (n == 0)
		{
			*closed = true;
			return false;
		}
		if (errno == EINTR && (flags & MSG_DONTWAIT))
			continue;
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
	}
}

/*
 * Read what has arrived into the reader, or report what node_wait() read.
 * Returns false on an I/O error (errno set) or, with *closed set, when the
 * peer closed the connection.
 */
bool
node_receive(RedisNode *node, bool *closed)
{
	bool		got;

	if (node->read_in_wait)
	{
		node->read_in_wait = false;
		*closed = node->read_closed;
		errno = node->read_errno;
		return node->read_ok;
	}
	return receive_from(node, MSG_DONTWAIT, closed, &got);
}

/*
 * Read, without blocking, what has arrived on a connection whose replies
 * nobody waits for one by one (a subscription's), and hand each complete
 * reply to take, which must not keep it; stop early if take closes the
 * connection.  False when the connection failed or closed, or its stream
 * is not valid RESP: the caller forgets what it had there.
 */
bool
node_take_replies(RedisNode *node,
				  void (*take) (void *arg, const redisReply *reply),
				  void *arg)
{
	bool		closed;
	redisReply *reply;

	if (!node_receive(node, &closed))
		return false;
	while (node_is_connected(node))
	{
		if (!node_next_reply(node, &reply))
			return false;
		if (reply == NULL)
			break;
		node->last_reply = GetCurrentTimestamp();
		take(arg, reply);
		freeReplyObject(reply);
	}
	return true;
}

/*
 * The next complete reply, if one has arrived: true with *reply set (NULL
 * when none is complete yet); false when the stream is not valid RESP.
 */
bool
node_next_reply(RedisNode *node, redisReply **reply)
{
	void	   *next = NULL;

	if (redisReaderGetReply(node->reader, &next) != REDIS_OK)
		return false;
	*reply = (redisReply *) next;
	return true;
}

