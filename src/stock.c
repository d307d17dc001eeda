/*-------------------------------------------------------------------------
 *
 * stock.c
 *		Flash-sale stock counters kept in Redis, and their SQL functions.
 *
 * A decrement checks and takes units in one Lua script, so concurrent
 * buyers can never oversell, and leaves a record of itself beside the stock
 * under an operation id.  The backend remembers each decrement, from before
 * it is sent, until its transaction ends: if the transaction, or the
 * savepoint the decrement was made in, rolls back, the units are given back
 * by that id, which is exact even when the decrement's reply was lost; at
 * commit the record is cleared.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>

#include <hiredis/hiredis.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "replication/message.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "redislock.h"

/* A decrement that a rollback must give back */
typedef struct PendingDecrement
{
	dlist_node	node;
	RedisConn  *conn;
	StockKeys	keys;
	char	   *buyer;			/* NULL when purchases are not per buyer */
	char	   *op_id;			/* this decrement's record */
	int64		qty;
	int			level;			/* subtransaction nesting level */
} PendingDecrement;

/* Numbers this backend's operations within a transaction ID */
static uint64 op_counter = 0;

/* The last transaction ID made durable for a decrement */
static FullTransactionId durable_xid = {0};

/*
 * "<system identifier>:<timeline>:<transaction ID>:" for durable_xid: the
 * start of the operation ids of its decrements, made once per transaction
 */
static char op_id_start[64];

/* Entries live in TopTransactionContext; the list is emptied at xact end */
static dlist_head pending = DLIST_STATIC_INIT(pending);

PG_FUNCTION_INFO_V1(redis_stock_set);
PG_FUNCTION_INFO_V1(redis_stock_get);
PG_FUNCTION_INFO_V1(redis_stock_incr);
PG_FUNCTION_INFO_V1(redis_stock_decr);
PG_FUNCTION_INFO_V1(redis_stock_delete);

/*
 * Stock needs one authoritative counter: a Redlock server's masters are
 * independent, and each would count on its own.
 */
void
stock_require_counter_server(const RedisConn *conn)
{
	if (!conn->topology->one_counter)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("Redis stock is not supported on Redlock server \"%s\"",
						conn->servername),
				 errdetail("Stock needs one authoritative counter, and the masters of a Redlock server are independent."),
				 errhint("Keep stock on a single Redis server, a Sentinel server or a Redis Cluster.")));
}

static int64
validated_qty(FunctionCallInfo fcinfo, int argno, bool zero_ok)
{
	int64		qty;

	require_argument(fcinfo, argno, "qty");
	qty = PG_GETARG_INT64(argno);
	if (qty < 0 || (qty == 0 && !zero_ok))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 zero_ok
				 ? errmsg("stock must not be negative: " INT64_FORMAT, qty)
				 : errmsg("qty must be greater than zero: " INT64_FORMAT, qty)));
	return qty;
}

/*
 * The connection of redislock.server, which must be a server that can keep
 * stock, and the Redis key there of the item named by the first argument
 */
static RedisConn *
stock_key_arg(FunctionCallInfo fcinfo, char **rkey, int *rkeylen)
{
	text	   *key = redis_key_arg(fcinfo, 0);
	RedisConn  *conn = redis_conn_current();

	*rkey = redis_key(conn->key_prefix, VARDATA_ANY(key),
					  VARSIZE_ANY_EXHDR(key), rkeylen);
	stock_require_counter_server(conn);
	return conn;
}

/*
 * Start a command on the stock key named by the first argument.  *key_out
 * receives the key as the user gave it, for messages.  Routing computes the
 * key's slot, if the server needs it.
 */
static void
prepare_stock_call(FunctionCallInfo fcinfo, RedisCall *call,
				   const char *command, const char **key_out)
{
	char	   *rkey;
	int			rkeylen;
	RedisConn  *conn = stock_key_arg(fcinfo, &rkey, &rkeylen);

	redis_call_init(call, conn, NULL);
	redis_call_arg(call, command, strlen(command));
	redis_call_arg(call, rkey, rkeylen);
	*key_out = rkey + strlen(conn->key_prefix);
}

/* Turn an error reply about a stock key into the matching PostgreSQL error */
static void
report_stock_error(const RedisCall *call, const char *key)
{
	if (redis_reply_is_error(call, "NOSTOCK"))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("Redis stock \"%s\" does not exist on server \"%s\"",
						key, call->conn->servername),
				 errdetail("Key \"%s\" is absent at %s.",
						   call->argv[0], call->node->endpoint),
				 errhint("Create it with redis_stock_set().")));
	if (redis_reply_is_error(call, "OVERFLOW") ||
		(call->reply_type == REDIS_REPLY_ERROR &&
		 strstr(call->str, "would overflow") != NULL))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("Redis stock \"%s\" on server \"%s\" would overflow",
						key, call->conn->servername),
				 errdetail("Redis answered: %s", call->str)));
	if (redis_reply_is_error(call, "NOTINT") ||
		(call->reply_type == REDIS_REPLY_ERROR &&
		 strstr(call->str, "not an integer") != NULL))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("Redis stock \"%s\" on server \"%s\" does not hold an integer",
						key, call->conn->servername),
				 errdetail("Key \"%s\" at %s holds something else.",
						   call->argv[call->script ? 0 : 1], call->node->endpoint)));
	redis_unexpected_reply(call, key, ERROR);
}

/* The integer reply of a stock command */
static int64
stock_result(const RedisCall *call, const char *key)
{
	if (call->reply_type != REDIS_REPLY_INTEGER)
		report_stock_error(call, key);
	return call->integer;
}

/*
 * The connection and keys of the item named by the first argument, which
 * must be on a server that can keep stock
 */
static RedisConn *
stock_item_arg(FunctionCallInfo fcinfo, StockKeys *keys)
{
	char	   *rkey;
	int			rkeylen;
	RedisConn  *conn = stock_key_arg(fcinfo, &rkey, &rkeylen);

	stock_keys_init(keys, rkey, rkeylen, strlen(conn->key_prefix));
	return conn;
}

/* Start a call on an item's keys, in their slot */
static void
stock_call_init(RedisCall *call, RedisConn *conn, const StockKeys *keys,
				const RedisScript *script)
{
	redis_call_init(call, conn, script);
	call->slot = keys->slot;
}

/*
 * redis_stock_set(key, qty): set the stock of an item to exactly qty, also
 * during a sale.  Decrements still pending neither add to it nor take from
 * it: their units were part of the stock that qty replaces.  One that
 * commits stays sold; one that rolls back gives back its buyer's right to
 * buy, but not its units.  Buyers stay marked: redis_stock_delete() starts
 * a sale afresh.
 */
Datum
redis_stock_set(PG_FUNCTION_ARGS)
{
	int64		qty = validated_qty(fcinfo, 1, true);
	StockKeys	keys;
	RedisConn  *conn = stock_item_arg(fcinfo, &keys);
	RedisCall	call;

	stock_keys_call(&call, conn, &keys, &stock_set_script);
	redis_call_int_arg(&call, qty);
	redis_run(&call, 1);
	if (call.reply_type != REDIS_REPLY_STATUS)
		report_stock_error(&call, keys.stock + keys.prefixlen);
	PG_RETURN_VOID();
}

/* redis_stock_get(key): the stock of an item, NULL when there is none */
Datum
redis_stock_get(PG_FUNCTION_ARGS)
{
	RedisCall	call;
	const char *key;
	char	   *end;
	long long	stock;

	prepare_stock_call(fcinfo, &call, "GET", &key);
	redis_run(&call, 1);
	if (call.reply_type == REDIS_REPLY_NIL)
		PG_RETURN_NULL();
	if (call.reply_type != REDIS_REPLY_STRING)
		report_stock_error(&call, key);

	errno = 0;
	stock = strtoll(call.str, &end, 10);
	if (errno != 0 || end == call.str || *end != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("Redis stock \"%s\" on server \"%s\" does not hold an integer",
						key, call.conn->servername),
				 errdetail("Key \"%s\" at %s holds \"%s\".",
						   call.argv[1], call.node->endpoint, call.str)));
	PG_RETURN_INT64((int64) stock);
}

/*
 * redis_stock_incr(key, qty): add units, creating the item if absent.
 * This is administration, not compensated on rollback.
 */
Datum
redis_stock_incr(PG_FUNCTION_ARGS)
{
	int64		qty = validated_qty(fcinfo, 1, false);
	RedisCall	call;
	const char *key;

	prepare_stock_call(fcinfo, &call, "INCRBY", &key);
	redis_call_int_arg(&call, qty);
	redis_run(&call, 1);
	PG_RETURN_INT64(stock_result(&call, key));
}

/*
 * redis_stock_delete(key): remove an item: its stock, its buyers and the
 * records of its decrements, all in its slot.  True when there was
 * something to remove.  Decrements still pending for it are not given back.
 */
Datum
redis_stock_delete(PG_FUNCTION_ARGS)
{
	StockKeys	keys;
	RedisConn  *conn = stock_item_arg(fcinfo, &keys);
	RedisCall	call;

	stock_call_init(&call, conn, &keys, NULL);
	redis_call_arg(&call, "DEL", 3);
	redis_call_arg(&call, keys.stock, keys.stocklen);
	redis_call_arg(&call, keys.records, keys.recordslen);
	redis_call_arg(&call, keys.buyers, keys.buyerslen);
	redis_run(&call, 1);
	PG_RETURN_BOOL(stock_result(&call, keys.stock + keys.prefixlen) > 0);
}

static const char *
validated_buyer(FunctionCallInfo fcinfo, int argno)
{
	char	   *buyer;

	/* a declaration of the function without buyer passes fewer arguments */
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	buyer = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	if (buyer[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("buyer must not be empty"),
				 errhint("Pass NULL to allow any number of purchases.")));
	return buyer;
}

/*
 * This cluster's timeline: the one its new WAL carries.  Each PITR and each
 * promotion of a standby starts a new one, so records of histories that
 * share the system identifier and reuse transaction IDs differ by it.
 */
TimeLineID
stock_current_timeline(void)
{
#if PG_VERSION_NUM >= 150000
	return GetWALInsertionTimeLine();
#else
	return ThisTimeLineID;
#endif
}

/*
 * The start of the operation ids of the current (sub)transaction's
 * decrements, "<system identifier>:<timeline>:<transaction ID>:".  The
 * transaction ID is assigned if need be and made durable before any
 * decrement carrying it reaches Redis.  A decrement's record names it, and
 * redis_stock_recover() judges the record by that transaction's fate on the
 * timeline named; an ID that never reached WAL could be handed out again
 * after a crash, and the record would then be judged by another
 * transaction.  A small WAL record carries the ID and is flushed; the
 * commit is made synchronous too, so that a transaction whose only work
 * was a decrement stays committed across a crash.
 */
static const char *
operation_id_start(void)
{
	FullTransactionId fxid = GetCurrentFullTransactionId();

	if (!FullTransactionIdEquals(fxid, durable_xid))
	{
		XLogFlush(LogLogicalMessage("redislock", "", 0, false));
		durable_xid = fxid;
		snprintf(op_id_start, sizeof(op_id_start),
				 UINT64_FORMAT ":%u:" UINT64_FORMAT ":",
				 GetSystemIdentifier(), stock_current_timeline(),
				 U64FromFullTransactionId(fxid));
	}
	ForceSyncCommit();
	return op_id_start;
}

/*
 * The record of a decrement of the key argument, made in
 * TopTransactionContext and listed before Redis is asked, so that a
 * decrement whose reply is lost is still given back at rollback.
 */
static PendingDecrement *
new_decrement(FunctionCallInfo fcinfo, int64 qty, const char *buyer)
{
	char	   *rkey;
	int			rkeylen;
	RedisConn  *conn = stock_key_arg(fcinfo, &rkey, &rkeylen);
	MemoryContext oldcxt;
	PendingDecrement *decrement;

	oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	decrement = palloc0(sizeof(PendingDecrement));

	decrement->conn = conn;
	stock_keys_init(&decrement->keys, rkey, rkeylen, strlen(conn->key_prefix));
	if (buyer != NULL)
		decrement->buyer = pstrdup(buyer);
	decrement->op_id = psprintf("%s" UINT64_FORMAT, operation_id_start(),
								++op_counter);
	decrement->qty = qty;
	decrement->level = GetCurrentTransactionNestLevel();
	MemoryContextSwitchTo(oldcxt);

	redis_conn_pin(conn);
	dlist_push_tail(&pending, &decrement->node);
	return decrement;
}

static void
forget_decrement(PendingDecrement *decrement)
{
	dlist_delete(&decrement->node);
	redis_conn_unpin(decrement->conn);
}

/*
 * An item's keys and what is kept beside them, made from its Redis key,
 * whose first prefixlen bytes are the server's key prefix
 */
void
stock_keys_init(StockKeys *keys, const char *rkey, int rkeylen, int prefixlen)
{
	keys->stock = pnstrdup(rkey, rkeylen);
	keys->stocklen = rkeylen;
	keys->prefixlen = prefixlen;
	keys->slot = redis_key_slot(rkey, rkeylen);
	keys->records = redis_sibling_key(rkey, rkeylen, prefixlen, keys->slot,
									  REDIS_SIBLING_RECORDS,
									  &keys->recordslen);
	keys->buyers = redis_sibling_key(rkey, rkeylen, prefixlen, keys->slot,
									 REDIS_SIBLING_BUYERS, &keys->buyerslen);
}

/*
 * Start a call of a script on an item: the set, decrement and give-back
 * scripts take the same keys, stock, records, buyers
 */
void
stock_keys_call(RedisCall *call, RedisConn *conn, const StockKeys *keys,
				const RedisScript *script)
{
	stock_call_init(call, conn, keys, script);
	call->nkeys = 3;
	redis_call_arg(call, keys->stock, keys->stocklen);
	redis_call_arg(call, keys->records, keys->recordslen);
	redis_call_arg(call, keys->buyers, keys->buyerslen);
}

/* The HDEL that clears the record of a committed decrement */
void
stock_clear_record_call(RedisCall *call, RedisConn *conn,
						const StockKeys *keys, const char *op_id)
{
	stock_call_init(call, conn, keys, NULL);
	redis_call_arg(call, "HDEL", 4);
	redis_call_arg(call, keys->records, keys->recordslen);
	redis_call_arg(call, op_id, strlen(op_id));
}

/* The stock left after a decrement, which Redis sends as a string */
static int64
remaining_stock(const RedisCall *call, const char *key)
{
	if (call->reply_type == REDIS_REPLY_INTEGER)
		return call->integer;
	if (call->reply_type != REDIS_REPLY_STRING)
		report_stock_error(call, key);
	return pg_strtoint64(call->str);
}

/*
 * redis_stock_decr(key, qty, buyer): take qty units if that many remain and
 * return what is left; -1 when there are too few, -2 when the buyer (if
 * given) has bought the item already.  The decrement is remembered so that
 * a rollback gives the units, and the buyer's right to buy, back.
 */
Datum
redis_stock_decr(PG_FUNCTION_ARGS)
{
	int64		qty = validated_qty(fcinfo, 1, false);
	const char *buyer = validated_buyer(fcinfo, 2);
	PendingDecrement *decrement = new_decrement(fcinfo, qty, buyer);
	const char *key = decrement->keys.stock + decrement->keys.prefixlen;
	RedisCall	calls[2];
	RedisCall  *call = &calls[0];
	int			ncalls = 1;
	int64		remaining;

	stock_keys_call(call, decrement->conn, &decrement->keys, &stock_decr_script);
	call->origin = decrement;
	redis_call_int_arg(call, qty);
	redis_call_arg(call, decrement->op_id, strlen(decrement->op_id));
	if (buyer != NULL)
		redis_call_arg(call, decrement->buyer, strlen(decrement->buyer));
	if (decrement->conn->min_replicas > 0)
		redis_call_wait_replicas(&calls[ncalls++], call);
	redis_run(calls, ncalls);

	/*
	 * A refusal took nothing.  An error reply is kept: the script undoes
	 * its writes when one fails, but should an undo fail too, what stays is
	 * a recorded decrement, and the statement's rollback gives it back by
	 * its operation id (finding no record otherwise).
	 */
	if (call->reply_type == REDIS_REPLY_INTEGER && call->integer < 0)
		forget_decrement(decrement);
	remaining = remaining_stock(call, key);

	/* the error's rollback gives the units back, as for any other error */
	if (remaining >= 0 && ncalls > 1 && !redis_replicas_acknowledged(&calls[1]))
		redis_report_replicas(&calls[1], key,
							  "the units are given back as the statement rolls back");
	PG_RETURN_INT64(remaining);
}

bool
stock_has_pending(void)
{
	return !dlist_is_empty(&pending);
}

/*
 * A batched give-back has run: report units that could not be given back,
 * then forget the decrement.  Its record stays in Redis when Redis could
 * not be reached, so the units are not lost: redis_stock_recover() finds
 * them.
 */
static void
giveback_done(RedisCall *call)
{
	PendingDecrement *decrement = (PendingDecrement *) call->origin;
	const char *key = decrement->keys.stock + decrement->keys.prefixlen;

	if (call->reply_type == REDIS_REPLY_INTEGER && call->integer == 0)
		ereport(WARNING,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("Redis stock \"%s\" on server \"%s\" was deleted before its rolled-back decrement could be given back",
						key, decrement->conn->servername),
				 errdetail("Quantity not given back: " INT64_FORMAT ".",
						   decrement->qty)));
	else if (call->reply_type == 0)
		ereport(WARNING,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("rolled-back decrement of Redis stock \"%s\" on server \"%s\" was not given back",
						key, decrement->conn->servername),
				 errdetail("Quantity not given back: " INT64_FORMAT "; the decrement's record stays at %s under operation id \"%s\".",
						   decrement->qty, redis_key_endpoint(decrement->conn, decrement->keys.stock,
											  decrement->keys.stocklen),
						   decrement->op_id)));
	else if (call->reply_type != REDIS_REPLY_INTEGER)
		redis_unexpected_reply(call, key, WARNING);
	else if (call->integer == 1)
		redis_count(decrement->conn, REDIS_STAT_GIVE_BACKS, 1);
	forget_decrement(decrement);
}

/* Queue the script that gives back the units of a decrement */
static void
queue_giveback(RedisBatch *batch, PendingDecrement *decrement)
{
	RedisCall  *call = redis_batch_add(batch);

	stock_keys_call(call, decrement->conn, &decrement->keys,
					&stock_giveback_script);
	call->origin = decrement;
	redis_call_arg(call, decrement->op_id, strlen(decrement->op_id));
	call->on_reply = giveback_done;
}

/*
 * Clear the records of committed decrements.  Nobody waits for the replies:
 * the commands cost no round trip at commit, and their replies are dropped
 * at the connection's next use.
 */
static void
clear_committed_records(void)
{
	RedisCall  *calls;
	int			ncalls = 0;
	dlist_iter	iter;

	dlist_foreach(iter, &pending)
		ncalls++;
	calls = palloc(sizeof(RedisCall) * ncalls);
	ncalls = 0;
	dlist_foreach(iter, &pending)
	{
		PendingDecrement *decrement = dlist_container(PendingDecrement, node,
													  iter.cur);
		stock_clear_record_call(&calls[ncalls++], decrement->conn,
								&decrement->keys, decrement->op_id);
	}
	redis_send_deferred(calls, ncalls);
}

/*
 * At transaction end, decrements of a committed transaction are final and
 * their records are cleared; those of a rolled-back one are given back.
 */
void
stock_end_xact(RedisBatch *batch, bool commit)
{
	dlist_mutable_iter iter;

	if (commit && !dlist_is_empty(&pending))
		clear_committed_records();
	dlist_foreach_modify(iter, &pending)
	{
		PendingDecrement *decrement = dlist_container(PendingDecrement, node,
													  iter.cur);

		if (commit)
			forget_decrement(decrement);
		else
			queue_giveback(batch, decrement);
	}
}

/*
 * At the end of a subtransaction, its decrements pass to the parent on
 * commit and are given back on rollback.
 */
void
stock_end_subxact(RedisBatch *batch, int level, bool commit)
{
	dlist_iter	iter;

	dlist_foreach(iter, &pending)
	{
		PendingDecrement *decrement = dlist_container(PendingDecrement, node,
													  iter.cur);

		if (decrement->level < level)
			continue;
		if (commit)
			decrement->level = level - 1;
		else
			queue_giveback(batch, decrement);
	}
}
