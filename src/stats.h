/*-------------------------------------------------------------------------
 *
 * stats.h
 *		Counters per Redis server, shared by all backends of a preloaded
 *		library, that redis_stats() shows (stats.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_STATS_H
#define REDISLOCK_STATS_H


/*
 * What redis_stats() counts per server, over all backends, when the
 * library is preloaded (stats.c).  Each layer counts what it does; the
 * lease watchdog and stock recovery count renewals, leases lost and
 * decrements recovered with redis_count() as well.
 */
typedef enum RedisStat
{
	REDIS_STAT_CALLS,			/* commands sent */
	REDIS_STAT_ROUND_TRIPS,		/* commands sent to a node and waited for */
	REDIS_STAT_ERRORS,			/* nodes that failed a run, error replies */
	REDIS_STAT_RECONNECTS,		/* connects of a node connected before */
	REDIS_STAT_REDIRECTS,		/* MOVED and ASK followed */
	REDIS_STAT_FAILOVERS,		/* a master found replaced */
	REDIS_STAT_ACQUIRES,		/* locks taken */
	REDIS_STAT_ACQUIRE_WAITS,	/* acquires that waited */
	REDIS_STAT_ACQUIRE_TIMEOUTS,	/* waits that ended without the lock */
	REDIS_STAT_WAIT_MS,			/* time those waits took */
	REDIS_STAT_RENEWALS,		/* leases renewed by the watchdog */
	REDIS_STAT_LEASES_LOST,		/* held locks found expired or taken */
	REDIS_STAT_GIVE_BACKS,		/* rolled-back decrements given back */
	REDIS_STAT_RECOVERED,		/* decrements given back by recovery */
	REDIS_STAT_SEMAPHORE_ACQUIRES,	/* semaphore permits taken */
	REDIS_STAT_SEMAPHORE_WAITS, /* semaphore acquires that waited */
	REDIS_STAT_SEMAPHORE_TIMEOUTS,	/* their waits that ended without */
	REDIS_STAT_SHARED_ACQUIRES, /* locks taken in shared mode */
	REDIS_STAT_SHARED_WAITS,	/* shared acquires that waited */
	REDIS_STAT_SHARED_TIMEOUTS, /* their waits that ended without */
	REDIS_NUM_STATS
} RedisStat;

struct RedisServerStats;

extern struct RedisServerStats *redis_server_stats(Oid serverid,
												   const char *servername);
extern void stats_count(struct RedisServerStats *stats, Oid serverid,
						RedisStat stat, int64 n);
extern void stats_shmem_request(void);
extern void stats_shmem_startup(void);

#endif							/* REDISLOCK_STATS_H */
