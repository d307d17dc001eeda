/*-------------------------------------------------------------------------
 *
 * guc.h
 *		The redislock.* settings (guc.c), and what only a preloaded library
 *		has.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_GUC_H
#define REDISLOCK_GUC_H

extern char *redislock_server_name;
extern int	redislock_connect_timeout;
extern int	redislock_command_timeout;
extern int	redislock_end_timeout_limit;
extern bool redislock_verify_before_commit;
extern bool redislock_lease_renewal;
extern int	redislock_lease_renewal_limit;
extern int	redislock_purge_delay;

/* Settings of a preloaded library only */
extern int	redislock_max_locks;
extern int	redislock_max_workers;
extern int	redislock_recover_interval; /* ms between recoveries, 0: none */

/* Loaded by shared_preload_libraries: shared memory is there */
extern bool redislock_preloaded;

extern void redislock_define_settings(bool preloaded);

/*
 * What only a preloaded library has (shared memory) is refused otherwise,
 * with a hint that says how to have it.
 */
static inline void
redis_require_preload(const char *funcname)
{
	if (!redislock_preloaded)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("redislock must be loaded via shared_preload_libraries to use %s()",
						funcname),
				 errhint("Add redislock to shared_preload_libraries in postgresql.conf and restart the server.")));
}

#endif							/* REDISLOCK_GUC_H */
