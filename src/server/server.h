/*-------------------------------------------------------------------------
 *
 * server.h
 *		Redis servers: the options of a foreign server, the connection
 *		cache, the nodes a server knows and the topology of each kind of
 *		server (option.c, connection.c, registry.c, topology.c, cluster.c,
 *		sentinel.c, redlock.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_SERVER_H
#define REDISLOCK_SERVER_H

#include "lib/ilist.h"

#include "io/io.h"
#include "keys.h"

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

extern RedisConn *redis_conn_current(void);
extern RedisConn *redis_conn_for_worker(Oid serverid, Oid userid);
extern void redis_conn_check_usage(const RedisConn *conn);
extern void redis_conn_pin(RedisConn *conn);
extern void redis_conn_unpin(RedisConn *conn);
extern void redis_conns_end_xact(void);
extern void redislock_init_connections(void);

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
	/*
	 * the node that serves key, keeping its hash slot in *slot (-1 until
	 * known); NULL when every key is on the one master
	 */
	RedisNode  *(*node_for_key) (RedisConn *conn, const char *key,
								 size_t len, int *slot);
	/* send a call where its MOVED or ASK reply says; false for others */
	bool		(*follow_redirect) (RedisCall *call);
	/* the masters, each once, as last known; NULL when there is one */
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
} RedisTopology;

extern const RedisTopology cluster_topology;
extern const RedisTopology sentinel_topology;
extern const RedisTopology redlock_topology;

/* Routing calls through their server's topology (topology.c) */
extern const RedisTopology *redis_topology_of_kind(RedisServerKind kind);
extern void redis_conn_init_topology(RedisConn *conn,
									 const RedisServerOptions *opts);
extern void redis_route_calls(RedisCall **calls, int ncalls);
extern RedisNode *redis_key_node(RedisConn *conn, const char *key,
								 int keylen);
extern const char *redis_key_endpoint(RedisConn *conn, const char *key,
									  int keylen);
extern void redis_conn_lost_node(RedisConn *conn);
extern int	redis_conn_known_masters(RedisConn *conn, RedisNode ***masters);
extern bool redis_follow_redirect(RedisCall *call);
extern bool redis_conn_decides_by_quorum(const RedisConn *conn);
extern bool redis_conn_learns_nodes(const RedisConn *conn);
extern int	redis_conn_script_group(RedisConn *conn, int slot, bool must_run);
extern int	redis_conn_drift_ms(const RedisConn *conn, int ttl_ms);
extern RedisCall **redis_expand_calls(RedisCall *calls, int ncalls,
									  int *npending);
extern bool redis_decide_calls(RedisCall *calls, int ncalls, int elevel);

/* The nodes of a server (registry.c) */
extern bool redis_split_endpoint(char *entry, char **host, int *port);
extern List *redis_parse_endpoints(const char *list, const char **bad_entry);
extern void redis_conn_add_endpoints(RedisConn *conn, List *endpoints,
									 const char *role);
extern int	redis_conn_node_index(RedisConn *conn, const char *host, int port);
extern RedisNode *redis_conn_add_subscriber(RedisConn *conn,
											const RedisNode *master);
extern int	redis_conn_nodes_to_ask(RedisConn *conn, bool sentinels,
									RedisNode ***nodes);

#endif							/* REDISLOCK_SERVER_H */
