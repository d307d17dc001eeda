/*-------------------------------------------------------------------------
 *
 * lock.h
 *		Redis locks: the locks a backend holds (held.c), their leases
 *		(lease.c), taking them (acquire.c), their SQL functions
 *		(lockfuncs.c, lockview.c) and their end with the transaction
 *		(lockend.c); the shared lock table of a preloaded library
 *		(locktable.c), and the subscriptions that wake a lock's waiters
 *		(wake.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_LOCK_H
#define REDISLOCK_LOCK_H

#include "lib/ilist.h"
#include "port/atomics.h"
#include "utils/hsearch.h"

#include "calls/calls.h"

/*
 * Transaction-end hooks (lockend.c), driven by xact.c.  Each queues its
 * Redis work in the batch, with an on_reply callback that reports failures
 * and forgets what is done once the batch has run.
 */
extern bool locks_have_xact_holds(void);
extern void locks_verify_before_commit(void);
extern void locks_end_xact(RedisBatch *batch, bool session_too);
extern void locks_end_subxact(RedisBatch *batch, int level, bool commit);

/*
 * The kinds of lock: an exclusive lock is a string key carrying its
 * holder's owner token; a lock held in shared mode is a sorted set of its
 * readers' owner tokens; a semaphore is a sorted set with one member per
 * permit held, as redis-semaphore keeps it.  A backend's exclusive and
 * shared holds of one key are two entries, which share the key in Redis.
 */
typedef enum LockMode
{
	LOCK_MODE_EXCLUSIVE,
	LOCK_MODE_SHARED,
	LOCK_MODE_SEMAPHORE
} LockMode;

/* What the lease watchdog shares with the holders' renewals (lease.c) */
extern void lock_extend_call(RedisCall *call, RedisConn *conn,
							 const char *rkey, int rkeylen, int slot,
							 const char *fence_key, int fence_keylen,
							 const char *token, int ttl_ms,
							 const char *hold_fence);
extern void semaphore_extend_call(RedisCall *call, RedisConn *conn,
								  const char *rkey, int rkeylen, int slot,
								  const char *token, int permits, int ttl_ms);
extern void shared_extend_call(RedisCall *call, RedisConn *conn,
							   const char *rkey, int rkeylen, int slot,
							   const char *token, int ttl_ms);
extern TimestampTz lock_lease_end(const RedisConn *conn, int ttl_ms,
								  TimestampTz start);

/*
 * The shared lock table (locktable.c), when the library is preloaded: an
 * entry for every Redis lock that a backend holds or waits for.
 *
 * What the holder publishes of a lock, and what redis_locks() shows.
 */
typedef struct RedisLockState
{
	LockMode	mode;
	bool		granted;		/* false while the holder waits for it */
	bool		session;		/* while waiting: asked for a session hold */
	int			session_holds;
	int			xact_holds;
	int			session_permits;	/* a semaphore's, of those holds */
	int			xact_permits;
	int			wait_permits;	/* a semaphore's, while waiting */
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
 * Waiting for a lock's release (wake.c): what a wait hears of it, and
 * what ended a wait
 */
#define WAKE_ANNOUNCED	0x01	/* our releases, on the waiter's channel */
#define WAKE_KEYSPACE	0x02	/* other clients' releases and expiries */
#define WAKE_LOST		0x04	/* a worker cannot listen, or no longer does */

typedef enum WakeCause
{
	WAKE_TIMEOUT,				/* nothing heard within the time given */
	WAKE_RELEASED,				/* a release or expiry was heard */
	WAKE_LATCH					/* the latch was set: look again now */
} WakeCause;

extern bool wake_listening(RedisConn *conn, const char *key, int keylen,
						   const char *channel, int channellen);
extern int	wake_subscribe(RedisConn *conn, const char *key, int keylen,
						   const char *channel, int channellen,
						   RedisDeadline deadline);
extern WakeCause wake_wait(RedisConn *conn, long timeout_ms,
						   bool holder_announces);
extern void wake_end(RedisConn *conn, bool granted);
extern void wake_close(RedisConn *conn);

/*
 * For the lock folder's own files only: a backend's locks, held or
 * awaited, and what the files that take, renew, release and show them call
 * of each other.  A file calls only files named before it here: held.c,
 * lease.c, acquire.c, then lockfuncs.c, lockview.c and lockend.c.
 */

/*
 * What identifies a lock: the foreign server, the full Redis key, and the
 * mode of the holds
 */
typedef struct LockTag
{
	Oid			serverid;
	int			keylen;
	const char *key;
	LockMode	mode;
} LockTag;

/* Transaction holds taken at one subtransaction nesting level */
typedef struct LevelHolds
{
	int			level;
	int			count;
} LevelHolds;

/*
 * The permits of a semaphore's holds, one entry a hold, in the order they
 * were taken; level 0 for a session hold, else the nesting level of a
 * transaction hold (nondecreasing among those).  In Redis, a backend's
 * permits of a semaphore are the members "<owner token>_0" up to
 * "<owner token>_<permits - 1>", whichever hold took them.
 */
typedef struct PermitHold
{
	int			level;
	int			permits;
} PermitHold;

typedef struct HeldLock
{
	LockTag		tag;			/* hash key; tag.key is owned by the entry */
	LockMode	mode;
	dlist_node	xact_link;		/* in touched_locks, when touched */
	bool		touched;		/* the current transaction has work for it */
	RedisConn  *conn;			/* where the lock was taken */
	int			prefixlen;		/* the user's key starts after the prefix */
	int			slot;			/* the key's Cluster hash slot */
	char	   *fence_key;		/* the sibling key of the fencing token */
	int			fence_keylen;
	char	   *waiters_key;	/* the sibling key of the waiters' queue */
	int			waiters_keylen;
	char	   *handoff_key;	/* the sibling key naming the woken waiter */
	int			handoff_keylen;
	char	   *wake_channel;	/* where a release wakes this backend, made
								 * at the first wait for it, else NULL */
	int			wake_channellen;
	bool		queued;			/* in the waiters' queue in Redis, as far as
								 * this backend knows */
	uint32		wake_request;	/* the worker listens for this wait: the
								 * request it answered, else 0 */
	int			wake_worker;	/* and the pid of that worker */
	int			session_holds;
	int			xact_holds;		/* sum of the counts in levels */
	LevelHolds *levels;			/* ascending nesting levels */
	int			nlevels;
	int			maxlevels;
	PermitHold *permit_holds;	/* a semaphore's holds, else NULL */
	int			npermit_holds;
	int			maxpermit_holds;
	int			permits;		/* a semaphore's permits, of every hold */
	int			wait_permits;	/* and those asked for, while acquiring */
	int			permits_reserved;	/* the permits an attempt whose outcome
									 * is unknown may have taken, with
									 * those held */
	int			limit;			/* the limit it was last asked for with */
	bool		in_redis;		/* may exist in Redis with our token */
	int64		fence;			/* 0 until acquired */
	int			ttl_ms;
	TimestampTz acquired_at;	/* 0 until granted */
	bool		loss_reported;	/* the check before commit reported its
								 * lease lost: its release keeps quiet */
	TimestampTz lease_expires_at;
	TimestampTz renew_until;	/* the lease watchdog renews it until then
								 * (DT_NOEND: no limit), 0: it does not */
	TimestampTz waiting_since;	/* while acquiring it, else 0 */
	bool		wait_session;	/* for a session hold, while acquiring */
	LockTableRef shared;		/* its entry in the shared lock table */
} HeldLock;

/* held.c: the locks by LockTag, and those the transaction touched */
extern HTAB *held_locks;
extern dlist_head touched_locks;
extern const char *lock_endpoint(const HeldLock *lock);
extern HeldLock *find_lock(Oid serverid, const char *rkey, int rkeylen,
						   LockMode mode);
extern bool other_mode_holds(const HeldLock *lock);
extern void touch_lock(HeldLock *lock);
extern void untouch_lock(HeldLock *lock);
extern HeldLock *create_lock(RedisConn *conn, const char *rkey, int rkeylen,
							 LockMode mode, bool session, int wait_permits);
extern void remove_lock(HeldLock *lock);
extern int	total_holds(const HeldLock *lock);
extern void lock_state(const HeldLock *lock, RedisLockState *state);
extern void publish_lock(const HeldLock *lock);
extern void note_lease_lost(HeldLock *lock);
extern const char *user_key(const HeldLock *lock);
extern void add_hold(HeldLock *lock, bool session, int permits);
extern int	permits_of_next_drop(const HeldLock *lock);
extern void drop_one_hold(HeldLock *lock);
extern int	drop_permit_holds(HeldLock *lock, int level);
extern void pass_permit_holds(HeldLock *lock, int level);
/*
 * The most locks that one script call names (held.c), so that a script
 * does not keep Redis from its other clients for long
 */
#define LOCKS_PER_SCRIPT	64

extern void order_by_script_group(HeldLock **locks, int *order, int n,
								  bool release);
extern int	script_group_size(HeldLock **locks, const int *order, int n,
							  bool release);
extern void lock_call_init(RedisCall *call, HeldLock *lock,
						   const RedisScript *script);
extern void add_lock_key(RedisCall *call, const HeldLock *lock);
extern void add_lock_keys(RedisCall *call, const HeldLock *lock);
extern char *conn_owner_token(RedisConn *conn);
extern void make_wake_channel(HeldLock *lock);
extern void add_queue_args(RedisCall *call, const HeldLock *lock);
extern void add_token_arg(RedisCall *call);
extern void prepare_release(RedisCall *call, HeldLock *lock,
							bool waits_no_more);
extern void prepare_permit_release(RedisCall *call, HeldLock *lock,
								   int first, int count, int expected,
								   bool waits_no_more);
extern void queue_releases(RedisBatch *batch, HeldLock **locks, int nlocks,
						   bool waits_no_more);
extern long long script_result(const RedisCall *call, const char *key);
extern void warn_lost(HeldLock *lock);

/* lease.c */
extern void set_lease(HeldLock *lock, int ttl_ms, TimestampTz start);
extern bool renewed_in_time(const HeldLock *lock, int ttl_ms,
							TimestampTz start);
extern bool renewal_kept_lock(const HeldLock *lock, bool renewed, int ttl_ms,
							  TimestampTz start);
extern int	errdetail_renewal_failed(const HeldLock *lock, bool renewed);
extern void check_ttl_for_server(const RedisConn *conn, int ttl_ms);
extern void prepare_extend(RedisCall *call, HeldLock *lock, int ttl_ms);
extern bool renew_held_lock(HeldLock *lock, int ttl_ms, int elevel);

/* acquire.c */
extern bool acquire_in_redis(HeldLock *lock, int ttl_ms, int wait_ms);
extern bool acquire_all_in_redis(HeldLock **locks, int nlocks, int ttl_ms,
								 int wait_ms);

#endif							/* REDISLOCK_LOCK_H */
