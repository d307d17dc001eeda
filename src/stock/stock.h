/*-------------------------------------------------------------------------
 *
 * stock.h
 *		Stock counters in Redis: decrements given back on rollback
 *		(stock.c), the rows that record their commits (decisions.c), and
 *		recovery (recover.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_STOCK_H
#define REDISLOCK_STOCK_H

#include "access/transam.h"
#include "access/xlogdefs.h"
#include "storage/itemptr.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"

#include "calls/calls.h"

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

#endif							/* REDISLOCK_STOCK_H */
