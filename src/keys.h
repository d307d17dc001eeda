/*-------------------------------------------------------------------------
 *
 * keys.h
 *		Key layout, the key arguments of SQL functions and the Redis Cluster
 *		hash slot of a key (keys.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_KEYS_H
#define REDISLOCK_KEYS_H

#include "fmgr.h"

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

/* The key argument of a SQL function, checked */
extern text *redis_key_arg(FunctionCallInfo fcinfo, int argno);

/* What the extension keeps beside a key, in a sibling key */
typedef enum RedisSiblingKind
{
	REDIS_SIBLING_FENCE,		/* a lock's fencing token */
	REDIS_SIBLING_RECORDS,		/* an item's decrement records */
	REDIS_SIBLING_BUYERS,		/* an item's buyers */
	REDIS_SIBLING_WAITERS,		/* the wake channels of a lock's waiters */
	REDIS_SIBLING_HANDOFF		/* the waiter a release of a lock woke */
} RedisSiblingKind;

/* Key layout */
extern char *redis_key(const char *prefix, const char *key, int keylen,
					   int *rkeylen);
extern char *redis_sibling_key(const char *rkey, int rkeylen, int prefixlen,
							   int slot, RedisSiblingKind kind, int *len);
extern char *redis_wake_channel(const char *rkey, int rkeylen, int prefixlen,
								int slot, const char *owner_token, int *len);
extern char *redis_sibling_owner(const char *rkey, int rkeylen, int prefixlen,
								 RedisSiblingKind kind, int *ownerlen);
extern char *redis_sibling_pattern(const char *prefix, RedisSiblingKind kind);
extern bool redis_prefix_is_valid(const char *prefix);
extern char *redis_keyspace_channel(int database, const char *key,
									int keylen, int *len);


/* The hash slots of Redis Cluster, and the slot of a key */
#define REDIS_CLUSTER_SLOTS 16384

extern int	redis_key_slot(const char *key, int len);

#endif							/* REDISLOCK_KEYS_H */
