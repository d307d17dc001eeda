/*-------------------------------------------------------------------------
 *
 * calls.h
 *		Running calls on the nodes of a server: connecting and the
 *		handshake, rounds that follow redirections and load scripts, and
 *		clean-up whose replies nobody waits for (batch.c, cleanup.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_CALLS_H
#define REDISLOCK_CALLS_H

#include "server/server.h"

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

/* Running calls on a server's nodes (batch.c) */
extern RedisDeadline redis_command_deadline(void);
extern void redis_connect(struct RedisConn *conn, const char *key, int keylen,
						  int slot);
extern int	redis_conn_masters(struct RedisConn *conn, RedisNode ***masters);
extern void redis_open_node(RedisNode *node);
extern void redis_run(RedisCall *calls, int ncalls);
extern bool redis_run_until(RedisCall *calls, int ncalls,
							RedisDeadline deadline, int elevel);

/* Calls whose replies nobody waits for (cleanup.c) */
extern void redis_send_deferred(RedisCall *calls, int ncalls);
extern void redis_send_hello(RedisNode *node);
extern void redis_hold_hdel(struct RedisConn *conn, const char *key,
							int keylen, const char *field, int fieldlen);
extern void redis_send_cleanup(RedisCall *call, uint64 end_id);
extern void redis_send_queued_cleanup(RedisNode *node);
extern void redis_release_held(RedisNode *node, RedisCall **calls,
							   int ncalls);
extern void redis_drop_reply(RedisNode *node, struct redisReply *reply);

#endif							/* REDISLOCK_CALLS_H */
