/*-------------------------------------------------------------------------
 *
 * stock.c
 *		Flash-sale stock counters kept in Redis, and their SQL functions.
 *
 * A decrement checks and takes units in one Lua script, so concurrent
 * buyers can never oversell.  The backend remembers each decrement until
 * its transaction ends; if the transaction, or the savepoint the decrement
 * was made in, rolls back, the units are given back with INCRBY.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>

#include <hiredis/hiredis.h>

#include "access/xact.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "redislock.h"

/* A decrement that a rollback must give back */
typedef struct PendingDecrement
{
	dlist_node	node;
	RedisConn  *conn;
	char	   *rkey;
	int			rkeylen;
	int			prefixlen;
	int64		qty;
	int			level;			/* subtransaction nesting level */
} PendingDecrement;

/* Entries live in TopTransactionContext; the list is emptied at xact end */
static dlist_head pending = DLIST_STATIC_INIT(pending);

PG_FUNCTION_INFO_V1(redis_stock_set);
PG_FUNCTION_INFO_V1(redis_stock_get);
PG_FUNCTION_INFO_V1(redis_stock_incr);
PG_FUNCTION_INFO_V1(redis_stock_decr);

static int64
validated_qty(FunctionCallInfo fcinfo, int argno, bool zero_ok)
{
	int64		qty;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("qty must not be null")));
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
 * Start a call on the stock key named by the first argument: a plain
 * command when command is given, else the script.
 */
static void
prepare_stock_call(FunctionCallInfo fcinfo, RedisCall *call,
				   const char *command, const RedisScript *script,
				   char **key_out)
{
	int			keylen;
	char	   *key = validated_key(PG_GETARG_DATUM(0), PG_ARGISNULL(0),
									&keylen);
	RedisConn  *conn = redis_conn_current();
	int			rkeylen;
	char	   *rkey = redis_key_for(conn, key, keylen, &rkeylen);

	redis_call_init(call, conn, script);
	if (command != NULL)
		redis_call_arg(call, command, strlen(command));
	else
		call->nkeys = 1;
	redis_call_arg(call, rkey, rkeylen);
	*key_out = key;
}

/* Turn an error reply about a stock key into the matching PostgreSQL error */
static void
report_stock_error(const RedisCall *call, const char *key)
{
	if (redis_reply_is_error(call, "NOSTOCK"))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("Redis stock \"%s\" does not exist", key),
				 errdetail("Key \"%s\" is absent at Redis server %s.",
						   call->argv[0], call->conn->endpoint),
				 errhint("Create it with redis_stock_set().")));
	if (redis_reply_is_error(call, "NOTINT") ||
		(call->reply_type == REDIS_REPLY_ERROR &&
		 strstr(call->str, "not an integer") != NULL))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("Redis stock \"%s\" does not hold an integer", key),
				 errdetail("Key \"%s\" at Redis server %s holds something else.",
						   call->argv[call->script ? 0 : 1], call->conn->endpoint)));
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

/* redis_stock_set(key, qty): set the stock of an item */
Datum
redis_stock_set(PG_FUNCTION_ARGS)
{
	int64		qty = validated_qty(fcinfo, 1, true);
	RedisCall	call;
	char	   *key;

	prepare_stock_call(fcinfo, &call, "SET", NULL, &key);
	redis_call_int_arg(&call, qty);
	redis_run(&call, 1, ERROR);
	if (call.reply_type != REDIS_REPLY_STATUS)
		report_stock_error(&call, key);
	PG_RETURN_VOID();
}

/* redis_stock_get(key): the stock of an item, NULL when there is none */
Datum
redis_stock_get(PG_FUNCTION_ARGS)
{
	RedisCall	call;
	char	   *key;
	char	   *end;
	long long	stock;

	prepare_stock_call(fcinfo, &call, "GET", NULL, &key);
	redis_run(&call, 1, ERROR);
	if (call.reply_type == REDIS_REPLY_NIL)
		PG_RETURN_NULL();
	if (call.reply_type != REDIS_REPLY_STRING)
		report_stock_error(&call, key);

	errno = 0;
	stock = strtoll(call.str, &end, 10);
	if (errno != 0 || end == call.str || *end != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("Redis stock \"%s\" does not hold an integer", key),
				 errdetail("Key \"%s\" at Redis server %s holds \"%s\".",
						   call.argv[1], call.conn->endpoint, call.str)));
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
	char	   *key;

	prepare_stock_call(fcinfo, &call, "INCRBY", NULL, &key);
	redis_call_int_arg(&call, qty);
	redis_run(&call, 1, ERROR);
	PG_RETURN_INT64(stock_result(&call, key));
}

/*
 * redis_stock_decr(key, qty): take qty units if that many remain and
 * return what is left, or -1 when there are too few.  The decrement is
 * remembered so that a rollback gives the units back.
 */
Datum
redis_stock_decr(PG_FUNCTION_ARGS)
{
	int64		qty = validated_qty(fcinfo, 1, false);
	RedisCall	call;
	char	   *key;
	PendingDecrement *decrement;
	int64		remaining;

	prepare_stock_call(fcinfo, &call, NULL, &stock_decr_script, &key);
	redis_call_int_arg(&call, qty);

	/* Allocate first: nothing may fail once Redis has taken the units */
	decrement = MemoryContextAlloc(TopTransactionContext,
								   sizeof(PendingDecrement));
	decrement->conn = call.conn;
	decrement->rkey = MemoryContextStrdup(TopTransactionContext, call.argv[0]);
	decrement->rkeylen = call.argvlen[0];
	decrement->prefixlen = strlen(call.conn->key_prefix);
	decrement->qty = qty;
	decrement->level = GetCurrentTransactionNestLevel();

	redis_run(&call, 1, ERROR);
	remaining = stock_result(&call, key);
	if (remaining < 0)
	{
		pfree(decrement->rkey);
		pfree(decrement);
		PG_RETURN_INT64(-1);
	}

	redis_conn_pin(decrement->conn);
	dlist_push_tail(&pending, &decrement->node);
	PG_RETURN_INT64(remaining);
}

bool
stock_has_pending(void)
{
	return !dlist_is_empty(&pending);
}

/* Queue the script that gives back the units of a decrement */
static void
queue_giveback(RedisBatch *batch, PendingDecrement *decrement)
{
	RedisCall  *call = redis_batch_add(batch);

	redis_call_init(call, decrement->conn, &stock_giveback_script);
	call->nkeys = 1;
	redis_call_arg(call, decrement->rkey, decrement->rkeylen);
	redis_call_int_arg(call, decrement->qty);
	call->origin = decrement;
}

static void
forget_decrement(PendingDecrement *decrement)
{
	dlist_delete(&decrement->node);
	redis_conn_unpin(decrement->conn);
}

/*
 * At transaction end, decrements of a committed transaction are final; those
 * of a rolled-back one are given back.
 */
void
stock_end_xact(RedisBatch *batch, bool commit)
{
	dlist_mutable_iter iter;

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

/*
 * After the batch ran: report units that could not be given back, then
 * forget the decrements.  Failures to reach Redis were reported by
 * redis_run(); these units stay taken, so stock is undersold, never
 * oversold.
 */
void
stock_batch_done(RedisBatch *batch)
{
	int			i;

	for (i = 0; i < batch->ncalls; i++)
	{
		RedisCall  *call = &batch->calls[i];
		PendingDecrement *decrement = (PendingDecrement *) call->origin;
		const char *key;

		if (call->script != &stock_giveback_script)
			continue;
		key = decrement->rkey + decrement->prefixlen;
		if (call->reply_type == REDIS_REPLY_NIL)
			ereport(WARNING,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("Redis stock \"%s\" was deleted before its rolled-back decrement could be given back",
							key),
					 errdetail("Quantity not given back: " INT64_FORMAT ".",
							   decrement->qty)));
		else if (call->reply_type == 0)
			ereport(WARNING,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("rolled-back decrement of Redis stock \"%s\" was not given back",
							key),
					 errdetail("Quantity not given back: " INT64_FORMAT ".",
							   decrement->qty)));
		else if (call->reply_type != REDIS_REPLY_INTEGER)
			redis_unexpected_reply(call, key, WARNING);
		forget_decrement(decrement);
	}
}
