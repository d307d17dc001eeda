/*-------------------------------------------------------------------------
 *
 * redislock.h
 *		Shared declarations of the redislock extension: Redis distributed
 *		locks and Redis-side stock counters tied to PostgreSQL transactions.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_H
#define REDISLOCK_H

#include "fmgr.h"
#include "lib/ilist.h"
#include "utils/timestamp.h"

/* Settings (redislock.*), defined in redislock.c */
extern char *redislock_server_name;
extern int	redislock_connect_timeout;
extern int	redislock_command_timeout;
extern bool redislock_verify_before_commit;

/* Wait event reported while waiting for a lock or for Redis */
extern uint32 redislock_wait_event;

/* The value every lock of this backend carries in Redis */
extern const char *redislock_owner_token(void);

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
extern RedisScript extend_script;
extern RedisScript stock_decr_script;
extern RedisScript stock_giveback_script;

extern void redislock_init_scripts(void);

/*
 * One connection to one Redis server, for one foreign server and user.
 * It keeps a copy of the options it was made with, so it can reconnect at
 * transaction end without catalog access.  Held locks and pending stock
 * decrements pin it; an entry whose options changed while pinned is
 * retired (kept for what it still holds) and replaced for new work.
 */
typedef struct RedisConn
{
	dlist_node	node;
	Oid			serverid;
	Oid			userid;
	uint32		server_hashvalue;	/* syscache hash of serverid */
	bool		invalidated;	/* catalog changed: re-read options */
	bool		retired;		/* replaced; alive only while pinned */
	int			pins;
	struct redisContext *ctx;	/* NULL while disconnected */
	int			applied_timeout;	/* command timeout set on ctx, ms */
	MemoryContext cxt;			/* holds the option strings below */
	char	   *host;
	int			port;
	char	   *unix_socket;
	int			database;
	char	   *key_prefix;
	char	   *username;
	char	   *password;
	char	   *endpoint;		/* "host:port" or the socket, for messages */
} RedisConn;

/* A Redis command, or a script call, and the reply copied out of hiredis */
#define REDIS_CALL_MAX_ARGS 6

typedef struct RedisCall
{
	RedisConn  *conn;
	const RedisScript *script;	/* NULL: argv is a plain command */
	int			nkeys;			/* for scripts: argv[0..nkeys-1] are keys */
	int			argc;
	const char *argv[REDIS_CALL_MAX_ARGS];	/* NULL: the integer below */
	size_t		argvlen[REDIS_CALL_MAX_ARGS];
	int64		intarg;			/* formatted when the call is sent */
	void	   *origin;			/* what the caller made this call for */
	void		(*on_reply) (struct RedisCall *call);	/* for batched calls */

	int			reply_type;		/* REDIS_REPLY_*, or 0 when none arrived */
	long long	integer;
	char	   *str;			/* palloc'd, NUL-terminated */
	size_t		len;
} RedisCall;

extern void redis_call_init(RedisCall *call, RedisConn *conn,
							const RedisScript *script);
extern void redis_call_arg(RedisCall *call, const char *arg, size_t len);
extern void redis_call_int_arg(RedisCall *call, int64 value);
extern bool redis_run(RedisCall *calls, int ncalls, int elevel);
extern void redis_unexpected_reply(const RedisCall *call, const char *key,
								   int elevel);
extern bool redis_reply_is_error(const RedisCall *call, const char *code);

extern RedisConn *redis_conn_current(void);
extern void redis_conn_connect(RedisConn *conn);
extern void redis_conn_pin(RedisConn *conn);
extern void redis_conn_unpin(RedisConn *conn);
extern void redislock_init_connections(void);

extern char *redis_key_arg(FunctionCallInfo fcinfo, int argno,
						   RedisConn **conn_out, int *rkeylen);
extern char *redis_sibling_key(const char *rkey, int rkeylen,
							   const char *suffix, int *len);
extern void require_argument(FunctionCallInfo fcinfo, int argno,
							 const char *name);

/* Transaction-end hooks of lock.c and stock.c, driven by xact.c */
typedef struct RedisBatch
{
	RedisCall  *calls;
	int			ncalls;
	int			maxcalls;
} RedisBatch;

extern RedisCall *redis_batch_add(RedisBatch *batch);

/*
 * Each queues its Redis work in the batch, with an on_reply callback that
 * reports failures and forgets what is done once the batch has run.
 */
extern bool locks_have_xact_holds(void);
extern void locks_verify_before_commit(void);
extern void locks_end_xact(RedisBatch *batch, bool session_too);
extern void locks_end_subxact(RedisBatch *batch, int level, bool commit);

extern bool stock_has_pending(void);
extern void stock_end_xact(RedisBatch *batch, bool commit);
extern void stock_end_subxact(RedisBatch *batch, int level, bool commit);

extern void redislock_init_xact(void);

#endif							/* REDISLOCK_H */
