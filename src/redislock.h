/*-------------------------------------------------------------------------
 *
 * redislock.h
 *		Shared declarations of the redislock extension: Redis distributed
 *		locks and Redis-side stock counters tied to PostgreSQL transactions.
 *
 * This header is the top of three: redislock.h for locks, stock and the
 * transaction story, topology.h for servers and their topologies, node.h
 * for Redis I/O.  Each file includes the lowest one it needs, and calls
 * only down this list of layers:
 *		redislock.c			the entry point: settings, callbacks, shared
 *							memory
 *		lock.c, stock.c,	the SQL functions: what to do with which keys;
 *		recover.c, xact.c	the transaction story and its ends
 *		decisions.c			the rows that make a decrement's commit its
 *							decision
 *		locktable.c			the shared lock table: every backend's locks
 *		connection.c,		the connection cache: foreign server and user,
 *		option.c			and their options
 *		wake.c				subscriptions that wake a lock's waiters
 *		args.c, keys.c,		SQL arguments, key layout, the Lua scripts
 *		scripts.c
 *		batch.c				running a set of calls over several nodes,
 *							asking the topologies what they must know
 *		cleanup.c			calls nobody waits for: clean-up after commit
 *		topology.c			routing calls through their server's topology,
 *							and a single server's
 *		cluster.c			a Redis Cluster: the master of a key's slot
 *		sentinel.c			a Sentinel server: the master they name
 *		redlock.c			Redlock: a quorum of independent masters
 *		registry.c			the nodes of a server, "host:port" endpoints
 *		call.c				building calls, their replies, Redis errors
 *		node.c				one non-blocking socket to one Redis node
 *		addressbook.c		the addresses of host names, for the processes
 *							that do not look names up
 *		resp.c				RESP encoding of commands
 *		stats.c				counters per server, shared by all backends
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_H
#define REDISLOCK_H

#include "access/transam.h"
#include "access/xlogdefs.h"
#include "fmgr.h"
#include "port/atomics.h"
#include "storage/itemptr.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"

#include "topology.h"

extern RedisScript acquire_script;
extern RedisScript release_script;
extern RedisScript abandon_script;
extern RedisScript extend_script;
extern RedisScript stock_decr_script;
extern RedisScript stock_giveback_script;
extern RedisScript stock_set_script;

extern void redislock_init_scripts(void);

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

/* What the extension keeps beside a key, in a sibling key (keys.c) */
typedef enum RedisSiblingKind
{
	REDIS_SIBLING_FENCE,		/* a lock's fencing token */
	REDIS_SIBLING_RECORDS,		/* an item's decrement records */
	REDIS_SIBLING_BUYERS,		/* an item's buyers */
	REDIS_SIBLING_WAITERS,		/* the wake channels of a lock's waiters */
	REDIS_SIBLING_HANDOFF		/* the waiter a release of a lock woke */
} RedisSiblingKind;

/* Key layout (keys.c) */
extern char *redis_key(const char *prefix, const char *key, int keylen,
					   int *rkeylen);
extern char *redis_sibling_key(const char *rkey, int rkeylen, int prefixlen,
							   int slot, RedisSiblingKind kind, int *len);
extern char *redis_wake_channel(const char *rkey, int rkeylen, int prefixlen,
								int slot, const char *owner_token, int *len);
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
extern void lock_extend_call(RedisCall *call, RedisConn *conn,
							 const char *rkey, int rkeylen, int slot,
							 const char *fence_key, int fence_keylen,
							 const char *token, int ttl_ms,
							 const char *hold_fence);
extern TimestampTz lock_lease_end(const RedisConn *conn, int ttl_ms,
								  TimestampTz start);
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

/*
 * A row of redis_stock_decrements, as the purge of rows whose records are
 * gone reads it (decisions.c)
 */
typedef struct StockDecision
{
	HeapTuple	tuple;			/* as read, to update it */
	TimestampTz gone_since;		/* when its record was first found gone, 0
								 * while it was not */
	char	   *op_id;
	char	   *records;		/* the Redis key of the item's records */
	int			recordslen;
} StockDecision;

extern Relation stock_decisions_open(Oid fn_oid, LOCKMODE lockmode);
extern void stock_decision_insert(Relation rel, FullTransactionId fxid,
								  const char *op_id, Oid serverid,
								  const char *records, int recordslen);
extern void stock_decisions_seen(Relation rel, Snapshot snapshot,
								 char **op_ids, int nops, bool *seen);
extern List *stock_decisions_of_server(Relation rel, Snapshot snapshot,
									   Oid serverid);
extern void stock_decision_set_gone_since(Relation rel,
										  const StockDecision *row,
										  TimestampTz gone_since);

extern void redislock_init_xact(void);

/*
 * The shared lock table (locktable.c), when the library is preloaded: an
 * entry for every Redis lock that a backend holds or waits for.
 *
 * What the holder publishes of a lock, and what redis_locks() shows.
 */
typedef struct RedisLockState
{
	bool		granted;		/* false while the holder waits for it */
	bool		session;		/* while waiting: asked for a session hold */
	int			session_holds;
	int			xact_holds;
	int			ttl_ms;
	int64		fence;
	TimestampTz waiting_since;	/* 0 once granted */
	TimestampTz acquired_at;
	TimestampTz lease_expires_at;
	TimestampTz renew_until;	/* the lease watchdog renews the lease until
								 * then (DT_NOEND: no limit), 0: it does not */
} RedisLockState;

/*
 * The part of a Redis key that an entry keeps, the server's key prefix
 * included: a longer key is shown cut, and cannot be renewed for its
 * holder (key_complete is false).
 */
#define REDISLOCK_ENTRY_KEY_LEN		256

/* Room for an owner token: "pg:" host(64) ":" port ":" pid ":" server ":" 32 hex */
#define REDISLOCK_TOKEN_HOST_LEN	64
#define REDISLOCK_TOKEN_LEN			136

/*
 * One entry.  The holder writes it, under the table's lock, except next,
 * which links the table's chains; what a renewer (the lease watchdog)
 * writes are the atomics at its end.  Everything a renewer needs is here:
 * the database, the user whose user mapping the holder used, the server,
 * the key and owner token, the ttl, and the holder's pid and PGPROC
 * number.  id is unique over the life of the
 * table: an entry whose id changed belongs to another lock, and an entry
 * outlives neither its lock nor its backend.
 */
typedef struct RedisLockEntry
{
	int			index;			/* its place in the table, fixed */
	int			next;			/* the next free entry, or while in use the
								 * next in its hash chain; -1 for none */
	uint64		id;				/* 0 while free */
	int			pid;			/* the holder (or waiter) */
	int			procno;			/* its PGPROC number */
	Oid			dbid;
	Oid			roleid;			/* the holder's session user: who sees key */
	Oid			userid;			/* whose user mapping the holder used */
	Oid			serverid;
	NameData	servername;
	int			keylen;			/* the whole Redis key's length */
	int			prefixlen;		/* of the server's key prefix */
	uint32		keyhash;		/* of the whole key, for comparing cut keys */
	bool		key_complete;	/* keylen <= REDISLOCK_ENTRY_KEY_LEN */
	char		key[REDISLOCK_ENTRY_KEY_LEN];	/* not NUL-terminated */
	char		token[REDISLOCK_TOKEN_LEN];
	RedisLockState state;
	pg_atomic_uint32 lost;		/* the lease was found lost */
	pg_atomic_uint64 renewals;	/* by the watchdog */
	pg_atomic_uint64 renewed_until; /* its last renewal's lease end */
	/* a waiter's request that the worker listen for releases (waker.c) */
	pg_atomic_uint32 wake_asked;	/* the request's number, 0 for none */
	pg_atomic_uint32 wake_answered; /* the last request answered */
	pg_atomic_uint32 wake_hears;	/* and its answer, WAKE_* bits */
	pg_atomic_uint32 wake_heard;	/* the worker heard a release since */
	pg_atomic_uint32 wake_holder_announces; /* a DEL is announced anyway */
} RedisLockEntry;

/* How a backend, or a renewer, names an entry: its place and its id */
typedef struct LockTableRef
{
	int			index;			/* -1: no shared table */
	uint64		id;
} LockTableRef;

extern Size locktable_shmem_size(void);
extern void locktable_shmem_request(void);
extern void locktable_shmem_startup(void);
extern void locktable_exit(int code, Datum arg);
extern LockTableRef locktable_claim(RedisConn *conn, const char *rkey,
									int rkeylen, const RedisLockState *state);
extern void locktable_publish(LockTableRef ref, const RedisLockState *state);
extern void locktable_release(LockTableRef ref);
extern bool locktable_wait_turn(LockTableRef ref, long timeout_ms);
extern RedisLockEntry *locktable_copy(int *count);
extern RedisLockEntry *locktable_copy_database(bool listens_only, int *count);
extern bool locktable_note_renewal(LockTableRef ref,
								   TimestampTz lease_expires_at);
extern bool locktable_mark_lost(LockTableRef ref);
extern bool locktable_lease_lost(LockTableRef ref);
extern uint32 locktable_wake_ask(LockTableRef ref);
extern int	locktable_wake_answer(LockTableRef ref, uint32 asked);
extern void locktable_wake_holder_announces(LockTableRef ref, bool announces);
extern bool locktable_wake_take_heard(LockTableRef ref);
extern void locktable_wake_end(LockTableRef ref);
extern uint32 locktable_wake_changes(void);
extern void locktable_wake_reply(LockTableRef ref, uint32 asked, int hears);
extern void locktable_wake_heard(LockTableRef ref, bool del);
extern bool locktable_key_visible(Oid roleid);
extern text *locktable_user_key(const RedisLockEntry *entry);

/*
 * The lease watchdog (watchdog.c), run by a database's background worker:
 * it renews the leases of the locks granted in its database.
 */
extern TimestampTz watchdog_renew_due_leases(void);

#endif							/* REDISLOCK_H */
