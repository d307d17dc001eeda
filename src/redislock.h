/*-------------------------------------------------------------------------
 *
 * redislock.h
 *		Shared declarations of the redislock extension: Redis distributed
 *		locks and Redis-side stock counters tied to PostgreSQL transactions.
 *
 * The layers, from the SQL functions down:
 *		lock.c, stock.c		what to do with which keys (the SQL functions)
 *		xact.c				what happens at transaction and backend end
 *		args.c				SQL arguments checked
 *		keys.c				key layout: prefix, Cluster slot, sibling keys
 *		connection.c		the connection cache: foreign server and user
 *		option.c			the options of servers and user mappings
 *		batch.c				running a set of calls over several nodes
 *		cleanup.c			calls nobody waits for: clean-up after commit
 *		topology.c			routing calls through their server's topology,
 *							and a single server's
 *		cluster.c			a Redis Cluster: the master of a key's slot
 *		sentinel.c			a Sentinel server: the master they name
 *		redlock.c			Redlock: a quorum of independent masters
 *		registry.c			the nodes of a server, "host:port" endpoints
 *		call.c				building calls, their replies, Redis errors
 *		node.c				one non-blocking socket to one Redis node
 *		resp.c				RESP encoding of commands
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_H
#define REDISLOCK_H

#include "access/xlogdefs.h"
#include "fmgr.h"
#include "lib/ilist.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "storage/latch.h"
#include "utils/timestamp.h"

struct addrinfo;
struct redisReader;
struct redisReply;

/* Settings (redislock.*), defined in redislock.c */
extern char *redislock_server_name;
extern int	redislock_connect_timeout;
extern int	redislock_command_timeout;
extern int	redislock_end_timeout_limit;
extern bool redislock_verify_before_commit;

/* Wait event reported while waiting for a lock or for Redis */
extern uint32 redislock_wait_event;


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

extern RedisScript acquire_script;
extern RedisScript release_script;
extern RedisScript abandon_script;
extern RedisScript extend_script;
extern RedisScript stock_decr_script;
extern RedisScript stock_giveback_script;
extern RedisScript stock_set_script;

extern void redislock_init_scripts(void);

struct RedisConn;

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
	struct addrinfo *addrs;		/* the host's addresses, found when first
								 * connecting: see open_socket() */
	pgsocket	sock;			/* PGINVALID_SOCKET while disconnected */
	struct redisReader *reader;
	WaitEventSet *waitset;		/* latch, postmaster death, sock */
	uint32		waitset_events; /* socket events registered in waitset */
	int			waitset_socket_pos; /* their position there */
	StringInfoData out;			/* encoded commands not written yet */
	int			out_sent;		/* bytes of out already written */
	int			awaiting;		/* replies sent for and not read */
	uint64		sent;			/* commands sent since connecting */
	List	   *redirectable;	/* clean-up sent after commit to a cluster
								 * node, whose reply may redirect it */
	List	   *queued_cleanup; /* clean-up for this node while it was not
								 * connected: sent once it is */
	int			deferred;		/* leading ones that nobody waits for */
	uint64		failed_end;		/* id of the transaction end it failed in */
	bool		checked;		/* known ready: connected, peer not gone */
	bool		stalled;		/* a call timed out, and no reply came since */
	TimestampTz last_reply;		/* when a reply last arrived */
	char	   *connect_error;	/* why the last connect failed, if it did */
	int			connect_sqlstate;	/* and the SQLSTATE that says so */
} RedisNode;

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
extern bool node_receive(RedisNode *node, bool *closed);
extern bool node_next_reply(RedisNode *node, struct redisReply **reply);
extern int	node_wait(RedisNode **nodes, const bool *waiting, int nnodes,
					  TimestampTz deadline, int elevel);

/* What a foreign server names: one Redis, or the seeds of a Redis Cluster */
typedef enum RedisServerKind
{
	REDIS_SERVER_SINGLE,
	REDIS_SERVER_CLUSTER,
	REDIS_SERVER_SENTINEL,
	REDIS_SERVER_REDLOCK
} RedisServerKind;

/*
 * The options of a foreign server and its user mapping, read and checked
 * by option.c, with defaults for those not set.  The connection cache
 * copies them into its entry.
 */
typedef struct RedisServerOptions
{
	RedisServerKind kind;
	const char *host;			/* a single server: host and port, */
	int			port;
	const char *unix_socket;	/* or a socket, NULL when unset */
	List	   *endpoints;		/* the cluster seeds, Sentinels or masters */
	const char *sentinel_master;
	int			database;
	const char *key_prefix;
	int			min_replicas;
	int			replica_timeout;
	const char *username;		/* from the user mapping, NULL when unset */
	const char *password;
	const char *sentinel_username;
	const char *sentinel_password;
} RedisServerOptions;

extern void redis_read_options(RedisServerOptions *opts, List *server_options,
							   List *mapping_options);

/* The hash slots of Redis Cluster */
#define REDIS_CLUSTER_SLOTS 16384

/*
 * One connection cache entry: a foreign server and user, the options they
 * were read with, and the nodes they lead to.  A copy of the options lets
 * transaction end reach Redis without catalog access.  Held locks and
 * pending stock decrements pin it; an entry whose options changed while
 * pinned is retired (kept for what it still holds) and replaced.
 */
typedef struct RedisConn
{
	dlist_node	node_link;
	Oid			serverid;
	Oid			userid;
	char	   *servername;		/* for messages */
	char	   *owner_token;	/* what our locks on this server carry, made
								 * at first use (lock.c) */
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
	TimestampTz master_checked_at;	/* Sentinel: when it was last named */
} RedisConn;

extern RedisConn *redis_conn_current(void);
extern void redis_conn_check_usage(const RedisConn *conn);
extern void redis_conn_pin(RedisConn *conn);
extern void redis_conn_unpin(RedisConn *conn);
extern void redis_conns_end_xact(void);
extern void redislock_init_connections(void);
extern bool redis_conn_is_connected(const RedisConn *conn);
extern void redis_conn_disconnect(RedisConn *conn);

/* A Redis command, or a script call, and the reply copied out of hiredis */
#define REDIS_CALL_MAX_ARGS 8

typedef struct RedisCall
{
	RedisConn  *conn;
	RedisNode  *node;			/* where it runs: set by routing, unless the
								 * caller chose a node (keyless commands) */
	bool		node_given;		/* the caller chose node: never rerouted */
	struct RedisCall *follows;	/* runs right after this one, on its node */
	struct Quorum *quorum;		/* Redlock: the answers of the masters */
	bool		asking;			/* ASK redirection: send ASKING before it */
	const RedisScript *script;	/* NULL: argv is a plain command */
	bool		send_body;		/* EVAL the script's text, not EVALSHA */
	int			nkeys;			/* for scripts: argv[0..nkeys-1] are keys */
	int			slot;			/* its key's Cluster slot, -1 until known */
	int			argc;
	const char *argv[REDIS_CALL_MAX_ARGS];	/* NULL: the integer below */
	size_t		argvlen[REDIS_CALL_MAX_ARGS];
	int64		intarg;			/* formatted when the call is sent */
	void	   *origin;			/* what the caller made this call for */
	void		(*on_reply) (struct RedisCall *call);	/* for batched calls */
	/* replaces the usual copy of a non-error reply, for nested arrays */
	void		(*parse_reply) (struct RedisCall *call,
								const struct redisReply *reply);
	bool		helper;			/* batch.c: SCRIPT LOAD or ASKING for a call */
	bool		load_script;	/* batch.c: was answered NOSCRIPT */
	bool		sent_again;		/* batch.c: goes out in the next round */

	int			reply_type;		/* REDIS_REPLY_*, or 0 when none arrived */
	long long	integer;
	char	   *str;			/* palloc'd, NUL-terminated */
	size_t		len;
	int			nelements;		/* an array's strings, nested ones inlined */
	char	  **elements;		/* palloc'd, NUL-terminated */
} RedisCall;

extern void resp_append_call(StringInfo buf, const RedisCall *call);
extern void resp_append_script_load(StringInfo buf, const RedisScript *script);

/*
 * An absolute deadline, the bound it came from for messages, whether that
 * bound is lock_timeout (a timeout is then a lock timeout), and whether it
 * counts from the first byte sent (command_timeout), so that connecting,
 * which has connect_timeout of its own, starts it again.  A lock_timeout
 * and the bound of a transaction end cover everything, connecting
 * included.  The calls of a transaction end carry its number, so that a
 * node that failed in it is left alone for the rest of it.
 */
typedef struct RedisDeadline
{
	TimestampTz at;
	int			ms;
	bool		lock_timeout;
	bool		from_first_byte;
	uint64		end_id;			/* the transaction end's, 0 for none */
} RedisDeadline;

extern void redis_call_init(RedisCall *call, RedisConn *conn,
							const RedisScript *script);
extern void redis_call_arg(RedisCall *call, const char *arg, size_t len);
extern void redis_call_int_arg(RedisCall *call, int64 value);
extern void redis_call_on_node(RedisCall *call, RedisNode *node);
extern void redis_call_wait_replicas(RedisCall *wait, RedisCall *after);
extern bool redis_replicas_acknowledged(const RedisCall *wait);
extern void redis_report_replicas(const RedisCall *wait, const char *key,
								  const char *undone) pg_attribute_noreturn();
extern RedisDeadline redis_command_deadline(void);
extern void redis_connect(RedisConn *conn, const char *key, int keylen,
						  int slot);
extern int	redis_conn_masters(RedisConn *conn, RedisNode ***masters);
extern void redis_run(RedisCall *calls, int ncalls);
extern bool redis_run_until(RedisCall *calls, int ncalls,
							RedisDeadline deadline, int elevel);

/* Calls whose replies nobody waits for (cleanup.c) */
extern void redis_send_deferred(RedisCall *calls, int ncalls);
extern void redis_send_cleanup(RedisCall *call, uint64 end_id);
extern void redis_send_queued_cleanup(RedisNode *node);
extern void redis_drop_reply(RedisNode *node, struct redisReply *reply);

extern void redis_unexpected_reply(const RedisCall *call, const char *key,
								   int elevel);
extern bool redis_reply_is_error(const RedisCall *call, const char *code);
extern bool redis_reply_is_unavailable(const RedisCall *call);
extern int	redis_error_sqlstate(const RedisCall *call);
extern int	redis_error_hint(const RedisCall *call);
extern void redis_call_take_reply(RedisCall *call, struct redisReply *reply);

/*
 * A question that a topology asks its nodes to learn where calls go (a
 * slot map, a master), and that the batch runs for it: the call, the level
 * its failure is reported at, and the topology's place in its questions.
 */
typedef struct RedisQuestion
{
	RedisCall	call;
	int			elevel;
	int			asked;			/* questions asked so far */
	void	   *state;			/* the topology's own */
	bool		known;			/* answered: ask no more */
} RedisQuestion;

/*
 * A kind of server: one Redis, Sentinel, Cluster or Redlock.  Its table
 * holds what batch.c and the SQL functions need to know of it, so that
 * they never test the kind; an operation left NULL does nothing, and a
 * single server leaves most of them NULL (topology.c).  No operation runs
 * calls itself: what a topology must ask its nodes, it asks through
 * next_question and take_answer, and the batch runs the questions.
 */
typedef struct RedisTopology
{
	/* make the nodes that the options name: the one, seeds, Sentinels... */
	void		(*init) (RedisConn *conn, const RedisServerOptions *opts);
	/* must it ask where calls go (not known, or may have changed)? */
	bool		(*must_ask) (const RedisConn *conn);
	/* the next question, false when none is left (reported at elevel) */
	bool		(*next_question) (RedisConn *conn, RedisQuestion *question,
								  int elevel);
	/* learn from the answer; question->known once where calls go is */
	void		(*take_answer) (RedisConn *conn, RedisQuestion *question);
	/* the node that serves key; *slot keeps its hash slot, -1 until known */
	RedisNode  *(*node_for_key) (RedisConn *conn, const char *key,
								 size_t len, int *slot);
	/* send a call where its MOVED or ASK reply says; false for others */
	bool		(*follow_redirect) (RedisCall *call);
	/* a node failed or said it cannot serve: ask again before next use */
	void		(*lost_node) (RedisConn *conn);
	/* the masters, each once, as last known */
	int			(*masters) (RedisConn *conn, RedisNode ***masters);
	/* the slots a node serves, as text, or NULL */
	char	   *(*node_slots) (RedisConn *conn, int nodeindex);

	/*
	 * A call on independent masters stands for a copy on each (expand
	 * fills copies, returns their number), whose answers are counted as
	 * they arrive; the call is decided by a quorum.
	 */
	int			(*expand) (RedisCall *call, RedisCall **copies);
	void		(*start_round) (RedisCall *copy);
	void		(*note_reply) (const RedisCall *copy);
	void		(*note_failure) (const RedisCall *copy, const char *reason,
								 int sqlstate);
	bool		(*copy_is_moot) (const RedisCall *copy);
	bool		(*decide) (RedisCall *call, int elevel);
	/* the clock drift that a lease of ttl_ms must outlast */
	int			(*drift_ms) (int ttl_ms);

	bool		nodes_replaced; /* a node that cannot be reached, or says
								 * READONLY, may have been replaced: its
								 * calls are routed afresh */
	bool		one_counter;	/* one node counts for the server (stock) */
} RedisTopology;

extern const RedisTopology single_topology;
extern const RedisTopology cluster_topology;
extern const RedisTopology sentinel_topology;
extern const RedisTopology redlock_topology;

/* Routing calls through their server's topology (topology.c) */
extern void redis_conn_init_topology(RedisConn *conn,
									 const RedisServerOptions *opts);
extern void redis_route_calls(RedisCall **calls, int ncalls);
extern const char *redis_key_endpoint(RedisConn *conn, const char *key,
									  int keylen);
extern void redis_conn_lost_node(RedisConn *conn);
extern bool redis_follow_redirect(RedisCall *call);
extern bool redis_conn_decides_by_quorum(const RedisConn *conn);
extern int	redis_conn_drift_ms(const RedisConn *conn, int ttl_ms);
extern RedisCall **redis_expand_calls(RedisCall *calls, int ncalls,
									  int *npending);
extern bool redis_decide_calls(RedisCall *calls, int ncalls, int elevel);

/* The calls of a transaction end, gathered from lock.c and stock.c */
typedef struct RedisBatch
{
	RedisCall  *calls;
	int			ncalls;
	int			maxcalls;
} RedisBatch;

extern RedisCall *redis_batch_add(RedisBatch *batch);

/*
 * The SQL functions are not STRICT, so that a NULL argument is an error.
 * Every file with SQL functions checks its arguments with this.
 */
static inline void
require_argument(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
}

/* SQL arguments (args.c) */
extern text *redis_key_arg(FunctionCallInfo fcinfo, int argno);

/* The nodes of a server (registry.c) */
extern bool redis_split_endpoint(char *entry, char **host, int *port);
extern List *redis_parse_endpoints(const char *list, const char **bad_entry);
extern void redis_conn_add_endpoints(RedisConn *conn, List *endpoints,
									 const char *role);
extern int	redis_conn_node_index(RedisConn *conn, const char *host, int port);
extern int	redis_conn_nodes_to_ask(RedisConn *conn, bool sentinels,
									RedisNode ***nodes);

/* What the extension keeps beside a key, in a sibling key (keys.c) */
typedef enum RedisSiblingKind
{
	REDIS_SIBLING_FENCE,		/* a lock's fencing token */
	REDIS_SIBLING_RECORDS,		/* an item's decrement records */
	REDIS_SIBLING_BUYERS		/* an item's buyers */
} RedisSiblingKind;

/* Key layout (keys.c) */
extern char *redis_key(const char *prefix, const char *key, int keylen,
					   int *rkeylen);
extern int	redis_key_slot(const char *key, int len);
extern char *redis_sibling_key(const char *rkey, int rkeylen, int prefixlen,
							   int slot, RedisSiblingKind kind, int *len);
extern char *redis_sibling_owner(const char *rkey, int rkeylen, int prefixlen,
								 RedisSiblingKind kind, int *ownerlen);
extern char *redis_sibling_pattern(const char *prefix, RedisSiblingKind kind);
extern void redis_check_key_not_reserved(const char *rkey, int rkeylen,
										 int prefixlen);
extern bool redis_prefix_is_valid(const char *prefix);

/*
 * Transaction-end hooks of lock.c and stock.c, driven by xact.c.  Each
 * queues its Redis work in the batch, with an on_reply callback that
 * reports failures and forgets what is done once the batch has run.
 */
extern bool locks_have_xact_holds(void);
extern void locks_verify_before_commit(void);
extern void locks_end_xact(RedisBatch *batch, bool session_too);
extern void locks_end_subxact(RedisBatch *batch, int level, bool commit);

/*
 * An item's keys, all in one slot: its stock (key_prefix || key), the
 * records of its decrements and its buyers
 */
typedef struct StockKeys
{
	char	   *stock;
	int			stocklen;
	int			prefixlen;
	int			slot;			/* their Cluster hash slot */
	char	   *records;
	int			recordslen;
	char	   *buyers;
	int			buyerslen;
} StockKeys;

extern void stock_keys_init(StockKeys *keys, const char *rkey, int rkeylen,
							int prefixlen);
extern void stock_keys_call(RedisCall *call, RedisConn *conn,
							const StockKeys *keys, const RedisScript *script);
extern void stock_clear_record_call(RedisCall *call, RedisConn *conn,
									const StockKeys *keys, const char *op_id);
extern void stock_require_counter_server(const RedisConn *conn);
extern TimeLineID stock_current_timeline(void);
extern bool stock_has_pending(void);
extern void stock_end_xact(RedisBatch *batch, bool commit);
extern void stock_end_subxact(RedisBatch *batch, int level, bool commit);

extern void redislock_init_xact(void);

#endif							/* REDISLOCK_H */
