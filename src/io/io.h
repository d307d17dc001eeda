/*-------------------------------------------------------------------------
 *
 * io.h
 *		Redis I/O: a non-blocking socket per node, the addresses of host
 *		names, RESP, and the calls sent to nodes with their replies
 *		and reading subscription connections (node.c, addressbook.c,
 *		resp.c, call.c, pubsub.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_IO_H
#define REDISLOCK_IO_H

#include "lib/ilist.h"
#include "lib/stringinfo.h"
#include "libpq/pqcomm.h"
#include "nodes/pg_list.h"
#include "storage/latch.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "stats.h"

struct redisReader;
struct redisReply;

struct RedisCall;
struct RedisTopology;

/* The addresses of a host name that a node or the address book keeps */
#define REDIS_HOST_MAX_ADDRS 8

/*
 * A Lua script run with EVALSHA.  The SHA-1 is computed locally once, so
 * the script text travels only when Redis answers NOSCRIPT.
 */
typedef struct RedisScript
{
	const char *name;
	const char *body;
	char		sha1[41];
} RedisScript;

/*
 * One Redis node: a non-blocking socket, the bytes still to be written to
 * it, and hiredis' reader for what comes back (node.c).
 */
typedef struct RedisNode
{
	struct RedisConn *conn;		/* the server it belongs to, credentials */
	const char *role;			/* "master", "replica", "sentinel", "unknown" */
	bool		is_sentinel;	/* authenticates with the Sentinel credentials */
	char	   *host;			/* NULL when unix_socket is set */
	int			port;
	char	   *unix_socket;
	char	   *endpoint;		/* "host:port" or the socket, for messages */
	SockAddr   *addrs;			/* the host's addresses, found when first
								 * connecting: see open_socket() */
	int			naddrs;			/* how many; 0 until found */
	pgsocket	sock;			/* PGINVALID_SOCKET while disconnected */
	struct redisReader *reader;
	WaitEventSet *waitset;		/* latch, postmaster death, sock */
	uint32		waitset_events; /* socket events registered in waitset */
	int			waitset_socket_pos; /* their position there */
	StringInfoData out;			/* encoded commands not written yet */
	int			out_sent;		/* bytes of out already written */
	int			awaiting;		/* replies sent for and not read */
	uint64		sent;			/* commands sent since connecting */
	List	   *held;			/* clean-up held back, not encoded yet: it
								 * goes out before what is next written */
	dlist_node	held_link;		/* in the list of nodes holding commands */
	List	   *redirectable;	/* clean-up sent after commit to a cluster
								 * node, whose reply may redirect it */
	List	   *queued_cleanup; /* clean-up for this node while it was not
								 * connected: sent once it is */
	int			deferred;		/* leading ones that nobody waits for */
	uint64		failed_end;		/* id of the transaction end it failed in */
	bool		checked;		/* known ready: connected, peer not gone */
	bool		stalled;		/* a call timed out, and no reply came since */
	TimestampTz last_reply;		/* when a reply last arrived */
	bool		read_in_wait;	/* node_wait() read the socket already, and */
	bool		read_ok;		/* node_receive() reports what it found */
	bool		read_closed;
	int			read_errno;
	bool		was_connected;	/* a connect now is a reconnect */
	char	   *connect_error;	/* why the last connect failed, if it did */
	int			connect_sqlstate;	/* and the SQLSTATE that says so */
	uint64		hello_seq;		/* the number of the HELLO sent after the
								 * handshake, whose reply nobody waits for */
	char	   *server_name;	/* what HELLO said it is, "redis" or
								 * "valkey", NULL if it said nothing */
	char	   *server_version; /* and its version */
	bool		standalone;		/* and that it runs without cluster mode, so
								 * that one script may name keys of any
								 * slot (false until it says so) */
} RedisNode;

/*
 * One connection cache entry (server/connection.c): a foreign server and
 * user, the options they were read with, and the nodes they lead to.  A
 * copy of the options lets transaction end reach Redis without catalog
 * access.  Held locks and pending stock decrements pin it; an entry whose
 * options changed while pinned is retired (kept for what it still holds)
 * and replaced.
 */
typedef struct RedisConn
{
	dlist_node	node_link;
	Oid			serverid;
	Oid			userid;
	char	   *servername;		/* for messages */
	char	   *owner_token;	/* what our locks on this server carry, made
								 * at first use (lock/held.c) */
	struct RedisServerStats *stats; /* the server's shared counters, NULL
									 * without the preload (stats.c) */
	uint32		server_hashvalue;	/* syscache hash of serverid */
	bool		invalidated;	/* catalog changed: re-read options */
	bool		retired;		/* replaced; alive only while pinned */
	bool		used_in_xact;	/* used by the current transaction */
	int			pins;
	MemoryContext cxt;			/* holds the option strings and nodes below */
	int			database;
	char	   *key_prefix;
	char	   *username;
	char	   *password;
	char	   *sentinel_master;
	char	   *sentinel_username;
	char	   *sentinel_password;
	int			min_replicas;	/* replicas that must acknowledge a write */
	int			replica_timeout;	/* how long to wait for them (ms) */
	const struct RedisTopology *topology;	/* its kind of server */
	RedisNode **nodes;			/* every node known: a single server's one,
								 * a cluster's seeds, masters and replicas,
								 * the Sentinels and the masters they named */
	int			nnodes;
	int			maxnodes;
	int16	   *slot_owner;		/* cluster: the index in nodes of each slot's
								 * master, -1 when unknown */
	bool		map_stale;		/* ask for the slot map or master first */
	uint64		routed_round;	/* redis_route_calls() that last asked */
	int			master_index;	/* Sentinel: the master in nodes, or -1 */
	List	   *subscribers;	/* nodes of their own for subscriptions,
								 * closed with the others (registry.c) */
	List	   *wake_nodes;		/* subscriptions of lock waits (wake.c) */
	TimestampTz master_checked_at;	/* Sentinel: when it was last named */
} RedisConn;

/*
 * Count n of a statistic for conn's server (stats.c), unless the server's
 * counters were given to another server
 */
static inline void
redis_count(RedisConn *conn, RedisStat stat, int64 n)
{
	stats_count(conn->stats, conn->serverid, stat, n);
}

extern RedisNode *node_create(struct RedisConn *conn, const char *host,
							  int port, const char *unix_socket);
extern bool node_connect(RedisNode *node, TimestampTz deadline, int elevel);
extern void node_report_connect_failure(const RedisNode *node, int elevel);
extern void node_set_connect_error(RedisNode *node, const char *reason);
extern void node_disconnect(RedisNode *node);
extern void node_destroy(RedisNode *node);
extern bool node_is_connected(const RedisNode *node);
extern bool node_peer_closed(RedisNode *node);
extern bool node_flush(RedisNode *node);
extern void node_hold_hdel(RedisNode *node, const char *key, int keylen,
						   const char *field, int fieldlen);
extern List *node_take_held(RedisNode *node);
extern void node_append_unwaited(RedisNode *node,
								 const struct RedisCall *call);
extern void node_flush_held(void);
extern bool node_receive(RedisNode *node, bool *closed);
extern bool node_next_reply(RedisNode *node, struct redisReply **reply);
extern bool node_take_replies(RedisNode *node,
							  void (*take) (void *arg,
											const struct redisReply *reply),
							  void *arg);
extern int	node_wait(RedisNode **nodes, const bool *waiting, int nnodes,
					  TimestampTz deadline, int elevel);

/*
 * The clear of a record held back for a node (node_hold_hdel()): an HDEL
 * of one field, the hash's key and then the field in one allocation
 */
typedef struct HeldHdel
{
	int			keylen;
	int			fieldlen;
	char		data[FLEXIBLE_ARRAY_MEMBER];
} HeldHdel;

/* The longest a blocking read waits before it looks at the latch again */
#define RECEIVE_SLICE_MS	10

/* Opening a node's socket, and the latch of its waits (socket.c) */
extern bool node_open_socket(RedisNode *node, TimestampTz deadline,
							 int elevel, int *err, const char **reason);
extern WaitEventSet *node_wait_set_create(bool kept, int nsockets);
extern long node_ms_until(TimestampTz deadline);
extern bool node_serve_interrupts(int elevel);

/*
 * Finding a node's addresses: looked up by SQL calls, which publish them,
 * taken from the shared address book by the rest (addressbook.c)
 */
extern bool node_may_look_up(void);
extern bool node_find_addresses(RedisNode *node, bool look_up,
								const char **reason);
extern void addressbook_shmem_request(void);
extern void addressbook_shmem_startup(void);

/*
 * A Redis command, or a script call, and the reply copied out of hiredis.
 * The first REDIS_CALL_MAX_ARGS arguments are kept in the call, integers
 * among them too; a script call on many keys keeps the rest in argv_more.
 */
#define REDIS_CALL_MAX_ARGS 8

typedef struct RedisCall
{
	struct RedisConn *conn;
	RedisNode  *node;			/* where it runs: set by routing, unless the
								 * caller chose a node (keyless commands) */
	bool		node_given;		/* the caller chose node: never rerouted */
	struct RedisCall *follows;	/* runs right after this one, on its node */
	struct Quorum *quorum;		/* Redlock: the answers of the masters */
	bool		asking;			/* ASK redirection: send ASKING before it */
	const RedisScript *script;	/* NULL: argv is a plain command */
	bool		send_body;		/* EVAL the script's text, not EVALSHA */
	int			nkeys;			/* for scripts: argv[0..nkeys-1] are keys */
	int			carries_hdels_of;	/* for scripts: n when the fields that
									 * HDELs held back for the node would
									 * delete from the hash KEYS[n] go as its
									 * last arguments; 0 for none */
	int			slot;			/* its key's Cluster slot, -1 until known */
	int			argc;
	const char *argv[REDIS_CALL_MAX_ARGS];	/* NULL: the integer in intargs */
	size_t		argvlen[REDIS_CALL_MAX_ARGS];
	const char **argv_more;		/* the arguments after those (palloc'd), */
	size_t	   *argvlen_more;
	int			maxargs_more;	/* and the room allocated for them */
	int64		intargs[REDIS_CALL_MAX_ARGS];	/* formatted when the call is
												 * sent */
	void	   *origin;			/* what the caller made this call for */
	void		(*on_reply) (struct RedisCall *call);	/* for batched calls */
	/* replaces the usual copy of a non-error reply, for nested arrays */
	void		(*parse_reply) (struct RedisCall *call,
								const struct redisReply *reply);
	/*
	 * A script call on several keys answers an array, an answer per key:
	 * each is taken as the reply of a part, in the order of the keys; a
	 * reply that is not such an array (an error, one answer for all, none)
	 * is every part's.
	 */
	struct RedisCall *parts;	/* palloc'd, NULL for a call on one key */
	int			nparts;
	bool		helper;			/* calls/: SCRIPT LOAD or ASKING for a call */
	bool		load_script;	/* calls/: was answered NOSCRIPT */
	bool		sent_again;		/* calls/: goes out in the next round */

	int			reply_type;		/* REDIS_REPLY_*, or 0 when none arrived */
	long long	integer;
	char	   *str;			/* palloc'd, NUL-terminated */
	size_t		len;
	int			nelements;		/* an array's strings, nested ones inlined */
	char	  **elements;		/* palloc'd, NUL-terminated */
} RedisCall;

/* The argument i of a call, and its length in *len */
static inline const char *
redis_call_argv(const RedisCall *call, int i, size_t *len)
{
	if (i < REDIS_CALL_MAX_ARGS)
	{
		*len = call->argvlen[i];
		return call->argv[i];
	}
	*len = call->argvlen_more[i - REDIS_CALL_MAX_ARGS];
	return call->argv_more[i - REDIS_CALL_MAX_ARGS];
}

/*
 * The answers of a call: its parts when it has some, else the call itself.
 * Whoever made a call on several keys reads each key's answer this way,
 * and a call on one key alike.
 */
static inline int
redis_call_nanswers(const RedisCall *call)
{
	return Max(call->nparts, 1);
}

static inline RedisCall *
redis_call_answer(RedisCall *call, int i)
{
	return call->nparts > 0 ? &call->parts[i] : call;
}

extern void resp_append_call(StringInfo buf, const RedisCall *call);
extern void resp_append_script_load(StringInfo buf, const RedisScript *script);

/* Building calls and reading their replies (call.c) */
extern void redis_call_init(RedisCall *call, struct RedisConn *conn,
							const RedisScript *script);
extern void redis_call_arg(RedisCall *call, const char *arg, size_t len);
extern void redis_call_int_arg(RedisCall *call, int64 value);
extern void redis_call_on_node(RedisCall *call, RedisNode *node);
extern RedisCall *redis_call_add_parts(RedisCall *call, int nparts);
extern void redis_call_spread_reply(RedisCall *call);
extern void redis_call_hdel(RedisCall *call, struct RedisConn *conn,
							const char *key, int keylen, const char *field,
							int fieldlen);
extern void redis_call_wait_replicas(RedisCall *wait, RedisCall *after);
extern bool redis_replicas_acknowledged(const RedisCall *wait);
pg_noreturn extern void redis_report_replicas(const RedisCall *wait,
											  const char *key,
											  const char *undone);
extern void redis_unexpected_reply(const RedisCall *call, const char *key,
								   int elevel);
extern bool redis_reply_is_error(const RedisCall *call, const char *code);
extern bool redis_reply_is_unavailable(const RedisCall *call);
extern int	redis_error_sqlstate(const RedisCall *call);
extern int	redis_error_hint(const RedisCall *call);
extern void redis_note_hello(RedisNode *node, const struct redisReply *reply);
extern void redis_call_take_reply(RedisCall *call, struct redisReply *reply);

/* Reading subscription connections (pubsub.c) */

/* What a keyspace event says of a lock's key */
typedef enum KeyspaceEvent
{
	KEYSPACE_KEEPS,				/* a lease renewal, a SET: still held */
	KEYSPACE_FREES,				/* an expiry, an eviction */
	KEYSPACE_DEL				/* a DEL, which our releases announce too */
} KeyspaceEvent;

/* What came on a subscription connection (pubsub_reply_kind()) */
typedef enum PubsubReplyKind
{
	PUBSUB_REPLY_OTHER,			/* nothing a subscriber acts on */
	PUBSUB_REPLY_ERROR,			/* an error reply */
	PUBSUB_REPLY_MESSAGE,			/* [s]message, channel, payload */
	PUBSUB_REPLY_SUBSCRIBED,		/* a [s]subscribe confirmed */
	PUBSUB_REPLY_UNSUBSCRIBED,	/* an [s]unsubscribe, asked for or not */
	PUBSUB_REPLY_KEYSPACE_CONFIG	/* CONFIG GET notify-keyspace-events */
} PubsubReplyKind;

extern bool pubsub_element_is(const struct redisReply *reply, int i,
							const char *str, int len);
extern PubsubReplyKind pubsub_reply_kind(const struct redisReply *reply);
extern bool pubsub_keyspace_events_on(const struct redisReply *reply);
extern KeyspaceEvent pubsub_keyspace_event(const char *event);
/* A set of calls that grows: those of a transaction end, for one */
typedef struct RedisBatch
{
	RedisCall  *calls;
	int			ncalls;
	int			maxcalls;
} RedisBatch;

extern RedisCall *redis_batch_add(RedisBatch *batch);

#endif							/* REDISLOCK_IO_H */
