/*-------------------------------------------------------------------------
 *
 * calls.h
 *		Running calls on the nodes of a server: each node's run (run.c),
 *		connecting and the handshake (connect.c), rounds that follow
 *		redirections and load scripts (batch.c), and clean-up whose replies
 *		nobody waits for (cleanup.c).
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

extern RedisDeadline redis_command_deadline(void);

/* Running calls on a server's nodes (batch.c, connect.c) */
extern void redis_connect(RedisConn *conn, const char *key, int keylen,
						  int slot);
extern int	redis_conn_masters(RedisConn *conn, RedisNode ***masters);
extern void redis_open_node(RedisNode *node);
extern void redis_run(RedisCall *calls, int ncalls);
extern bool redis_run_until(RedisCall *calls, int ncalls,
							RedisDeadline deadline, int elevel);

/* Calls whose replies nobody waits for (cleanup.c) */
extern void redis_send_deferred(RedisCall *calls, int ncalls);
extern void redis_send_hello(RedisNode *node);
extern void redis_hold_hdel(RedisConn *conn, const char *key,
							int keylen, const char *field, int fieldlen);
extern void redis_send_cleanup(RedisCall *call, uint64 end_id);
extern void redis_send_queued_cleanup(RedisNode *node);
extern void redis_release_held(RedisNode *node, RedisCall **calls,
							   int ncalls);
extern void redis_drop_reply(RedisNode *node, struct redisReply *reply);

/*
 * What the files of calls/ share: the runs of a set of calls, one a node
 * (run.c), and why a node's replies stopped coming
 */
typedef enum RunFailure
{
	RUN_OK,
	RUN_SKIPPED,				/* the node failed earlier in this end */
	RUN_NOT_CONNECTED,			/* the connect failed */
	RUN_NOT_ACCEPTED,			/* the handshake failed, reported then */
	RUN_REROUTED,				/* not connected; its calls go elsewhere */
	RUN_MOOT,					/* Redlock: decided without its replies */
	RUN_TIMED_OUT,
	RUN_GIVEN_UP,				/* termination requested during an end */
	RUN_NOT_WAITED,				/* an end sent its calls to a stalled node */
	RUN_IO_ERROR,
	RUN_CLOSED,
	RUN_PROTOCOL_ERROR
} RunFailure;

/* The calls of one run that go to one node, in the order they are sent */
typedef struct NodeRun
{
	RedisNode  *node;
	RedisCall **wanted;			/* the caller's calls */
	int			nwanted;
	RedisCall **calls;			/* what is sent: those and their helpers */
	int			ncalls;
	int			nreplied;
	RunFailure	failure;
	int			failure_errno;
	bool		close_after;	/* Redis said it cannot serve */
	bool		subscribes;		/* connects a subscription's connection */
} NodeRun;

extern void run_send(NodeRun *run);
extern void run_await_replies(NodeRun *runs, int nruns, TimestampTz deadline,
							  int elevel);
extern void run_fail(NodeRun *run, RunFailure failure, int saved_errno);
extern bool run_failed_after_sending(RunFailure failure);
extern void run_note_quorum_failure(const NodeRun *run,
									RedisDeadline deadline);
extern void run_report_failure(const NodeRun *run, RedisDeadline deadline,
							   int elevel);
extern const char *run_failure_reason(const NodeRun *run,
									  RedisDeadline deadline, int *sqlstate);

/* Making a run's node ready (connect.c) */
extern bool run_prepare_node(NodeRun *run, RedisDeadline *deadline,
							 int elevel);

#endif							/* REDISLOCK_CALLS_H */
