/*-------------------------------------------------------------------------
 *
 * scripts.h
 *		The Lua scripts that redislock runs with EVALSHA: those of locks and
 *		semaphores (scripts.c), and of stock (stockscripts.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_SCRIPTS_H
#define REDISLOCK_SCRIPTS_H

#include "io/io.h"

extern RedisScript acquire_script;
extern RedisScript acquire_set_script;
extern RedisScript release_script;
extern RedisScript release_set_script;
extern RedisScript abandon_script;
extern RedisScript extend_script;
extern RedisScript semaphore_acquire_script;
extern RedisScript semaphore_release_script;
extern RedisScript semaphore_extend_script;
extern RedisScript shared_acquire_script;
extern RedisScript shared_release_script;
extern RedisScript shared_extend_script;
extern RedisScript downgrade_script;
extern RedisScript stock_decr_script;
extern RedisScript stock_giveback_script;
extern RedisScript stock_set_script;

extern void redislock_init_scripts(void);

#endif							/* REDISLOCK_SCRIPTS_H */
