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
 * by that id, which is exact even when the decrement's reply was lost.  A
 * decrement that took units also writes a row in the same (sub)transaction
 * (decisions.c), which commits or vanishes with it: that is what
 * redis_stock_recover() decides by when the backend could not.  Once the
 * commit is durable, the record is cleared, by a command that goes out
 * with the backend's next one to that Redis, or inside it when that is a
 * decrement of the same item (send_clears()).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>

#include <hiredis/hiredis.h>

#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "scripts.h"
#include "stock/stock.h"

/* A decrement that a rollback must give back */
typedef struct PendingDecrement
{
	dlist_node	node;
	RedisConn  *conn;
	StockKeys	keys;
	char	   *buyer;			/* NULL when purchases are not per buyer */
	char	   *op_id;			/* this decrement's record */
	FullTransactionId xid;		/* the (sub)transaction that made it */
	int64		qty;
	int			level;			/* subtransaction nesting level */
	XLogRecPtr	commit_end;		/* once committed: the end of the commit */
} PendingDecrement;

/*
 * The number of this backend's next operation.  It starts at a random
 * point, so that operation ids differ also between two transactions with
 * one ID: one whose ID never reached WAL before a crash, and the one that
 * is given that ID again after it.
 */
static uint64 op_number = 0;

/*
 * The (sub)transaction, and the table of decisions, whose operation ids
 * op_id_start begins
 */
static FullTransactionId op_id_xid = {0};
static Oid	op_id_table = InvalidOid;

/*
 * "<system identifier>:<timeline>:<database>:<table>:<transaction ID>:" for
 * op_id_xid: the start of the operation ids of its decrements, made once
 * per transaction
 */
static char op_id_start[80];
static int	op_id_startlen;

/* Entries live in TopTransactionContext; the list is emptied at xact end */
static dlist_head pending = DLIST_STATIC_INIT(pending);

/*
 * Committed decrements whose records wait for the commit to be durable
 * (synchronous_commit = off), oldest commit first, in awaiting_flush_cxt
 */
static dlist_head awaiting_flush = DLIST_STATIC_INIT(awaiting_flush);
static MemoryContext awaiting_flush_cxt = NULL;

/* Items whose keys are kept from one decrement to the next */
#define KEPT_ITEMS	16

/*
 * The keys of the items decremented last, in TopMemoryContext: an item's
 * Redis key, slot and siblings are the same at every decrement of it, and
 * making them is much of what a decrement costs besides Redis.  An item is
 * found by the server's key prefix and the user's key, with which its
 * Redis key starts.  The pending decrements of the transaction share their
 * item's keys, so an item is replaced only when none of them uses it.
 */
static StockKeys kept_items[KEPT_ITEMS];
static int	nkept_items = 0;

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
	if (redis_conn_decides_by_quorum(conn))
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

/*
 * Does an error reply say this?  Our scripts answer with the code; Redis's
 * own INCRBY/DECRBY, run by the plain commands, say it in words.
 */
static bool
stock_reply_says(const RedisCall *call, const char *code, const char *words)
{
	return redis_reply_is_error(call, code) ||
		(call->reply_type == REDIS_REPLY_ERROR &&
		 strstr(call->str, words) != NULL);
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
	if (stock_reply_says(call, "OVERFLOW", "would overflow"))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("Redis stock \"%s\" on server \"%s\" would overflow",
						key, call->conn->servername),
				 errdetail("Redis answered: %s", call->str)));
	if (stock_reply_says(call, "NOTINT", "not an integer"))
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
	return GetWALInsertionTimeLine();
}

/*
 * The operation id of a decrement by the current (sub)transaction, whose
 * row goes into the table whose OID is table (redis_stock_decrements):
 * "<system identifier>:<timeline>:<database>:<table>:<transaction
 * ID>:<number>".  The transaction ID is assigned if need be; it tells
 * redis_stock_recover() whose end to wait for, the timeline on which that
 * ID means this transaction, and the database and table that hold its row:
 * only a recovery that reads that table may decide it by its row.  The
 * number makes the id unique: an ID that had not reached WAL may be handed
 * out again after a crash.
 */
static char *
operation_id(Oid table)
{
	FullTransactionId fxid = GetCurrentFullTransactionId();
	char	   *op_id;
	int			len;

	/* numbers are written by hand: a format would cost more than the rest */
	if (!FullTransactionIdEquals(fxid, op_id_xid) || table != op_id_table)
	{
		char	   *p = op_id_start;

		op_id_xid = fxid;
		op_id_table = table;
		p += pg_ulltoa_n(GetSystemIdentifier(), p);
		*p++ = ':';
		p += pg_ultoa_n(stock_current_timeline(), p);
		*p++ = ':';
		p += pg_ultoa_n(MyDatabaseId, p);
		*p++ = ':';
		p += pg_ultoa_n(table, p);
		*p++ = ':';
		p += pg_ulltoa_n(U64FromFullTransactionId(fxid), p);
		*p++ = ':';
		op_id_startlen = p - op_id_start;
	}
	if (op_number == 0 && !pg_strong_random(&op_number, sizeof(op_number)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random operation number")));
	op_id = palloc(op_id_startlen + MAXINT8LEN + 1);
	memcpy(op_id, op_id_start, op_id_startlen);
	len = op_id_startlen + pg_ulltoa_n(op_number++, op_id + op_id_startlen);
	op_id[len] = '\0';
	return op_id;
}

/* Does a pending decrement use the kept keys of an item? */
static bool
kept_item_in_use(const StockKeys *kept)
{
	dlist_iter	iter;

	dlist_foreach(iter, &pending)
		if (dlist_container(PendingDecrement, node, iter.cur)->keys.stock ==
			kept->stock)
			return true;
	return false;
}

/*
 * A place for the keys of a new item among the kept ones: a free one, or
 * one that no pending decrement uses, emptied.  NULL when there is none.
 */
static StockKeys *
free_kept_item(void)
{
	int			i;

	if (nkept_items < KEPT_ITEMS)
		return &kept_items[nkept_items++];
	for (i = 0; i < KEPT_ITEMS; i++)
	{
		if (kept_item_in_use(&kept_items[i]))
			continue;
		pfree(kept_items[i].stock);
		pfree(kept_items[i].records);
		pfree(kept_items[i].buyers);
		return &kept_items[i];
	}
	return NULL;
}

/*
 * The keys of the item named key on conn's server, kept for the next
 * decrement of it (see kept_items), or else made in the current memory
 * context
 */
static void
item_keys(RedisConn *conn, const text *key, StockKeys *keys)
{
	const char *name = VARDATA_ANY(key);
	int			namelen = VARSIZE_ANY_EXHDR(key);
	int			prefixlen = strlen(conn->key_prefix);
	char	   *rkey;
	int			rkeylen;
	StockKeys  *kept;
	MemoryContext oldcxt;
	int			i;

	for (i = 0; i < nkept_items; i++)
	{
		kept = &kept_items[i];
		if (kept->prefixlen == prefixlen &&
			kept->stocklen == prefixlen + namelen &&
			memcmp(kept->stock, conn->key_prefix, prefixlen) == 0 &&
			memcmp(kept->stock + prefixlen, name, namelen) == 0)
		{
			*keys = *kept;
			return;
		}
	}
	rkey = redis_key(conn->key_prefix, name, namelen, &rkeylen);
	kept = free_kept_item();
	if (kept == NULL)
	{
		stock_keys_init(keys, rkey, rkeylen, prefixlen);
		return;
	}
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	stock_keys_init(kept, rkey, rkeylen, prefixlen);
	MemoryContextSwitchTo(oldcxt);
	*keys = *kept;
}

/*
 * The record of a decrement of the key argument, made in
 * TopTransactionContext and listed before Redis is asked, so that a
 * decrement whose reply is lost is still given back at rollback.  Its
 * keys may be shared with the kept ones (see kept_items).
 */
static PendingDecrement *
new_decrement(FunctionCallInfo fcinfo, int64 qty, const char *buyer,
			  Oid table)
{
	text	   *key = redis_key_arg(fcinfo, 0);
	RedisConn  *conn = redis_conn_current();
	MemoryContext oldcxt;
	PendingDecrement *decrement;

	oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	decrement = palloc0(sizeof(PendingDecrement));

	decrement->conn = conn;
	item_keys(conn, key, &decrement->keys);
	stock_require_counter_server(conn);
	if (buyer != NULL)
		decrement->buyer = pstrdup(buyer);
	decrement->op_id = operation_id(table);
	decrement->xid = GetCurrentFullTransactionId();
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

/*
 * The stock left after a decrement, which Redis sends as an integer, or as
 * a string from 2^53 on
 */
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
 * a rollback gives the units, and the buyer's right to buy, back, and one
 * that took units writes its row.  The table is opened first, so that a
 * database whose extension lacks it fails before Redis is asked.
 */
Datum
redis_stock_decr(PG_FUNCTION_ARGS)
{
	int64		qty = validated_qty(fcinfo, 1, false);
	const char *buyer = validated_buyer(fcinfo, 2);
	Relation	decisions;
	PendingDecrement *decrement;
	const char *key;
	RedisCall	calls[2];
	RedisCall  *call = &calls[0];
	int			ncalls = 1;
	int64		remaining;

	/* its row is written as an INSERT's would be, and refused as one is */
	PreventCommandIfReadOnly("redis_stock_decr()");
	decisions = stock_decisions_open(fcinfo->flinfo->fn_oid, RowExclusiveLock);
	decrement = new_decrement(fcinfo, qty, buyer, RelationGetRelid(decisions));
	key = decrement->keys.stock + decrement->keys.prefixlen;

	stock_keys_call(call, decrement->conn, &decrement->keys, &stock_decr_script);
	call->origin = decrement;
	call->carries_hdels_of = 2; /* the clears of the item's records */
	redis_call_int_arg(call, qty);
	redis_call_arg(call, decrement->op_id, strlen(decrement->op_id));
	if (buyer != NULL)
		redis_call_arg(call, decrement->buyer, strlen(decrement->buyer));
	else
		redis_call_arg(call, "", 0);
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
	if (remaining >= 0)
		stock_decision_insert(decisions, decrement->xid, decrement->op_id,
							  decrement->conn->serverid,
							  decrement->keys.records,
							  decrement->keys.recordslen);
	table_close(decisions, NoLock);
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
 * Clear the records of the committed decrements of the list head.  Nobody
 * waits for the replies, and the commands are held back: they go out with
 * the next command to their node, or when the backend exits or the
 * connection closes, so that a clear costs no system call and no read of
 * Redis's of its own.  The next decrement of the same item carries them in
 * its script, where they cost Redis no command of their own either.  A
 * clear that never goes out (the connection fails first, or the backend is
 * killed) leaves the record beside its committed row, and
 * redis_stock_recover() decides it committed and clears it.
 */
static void
send_clears(dlist_head *head)
{
	dlist_iter	iter;

	dlist_foreach(iter, head)
	{
		PendingDecrement *decrement = dlist_container(PendingDecrement, node,
													  iter.cur);

		redis_hold_hdel(decrement->conn, decrement->keys.records,
						decrement->keys.recordslen, decrement->op_id,
						strlen(decrement->op_id));
	}
}

/*
 * Keep the committed decrements of the list head until their commit is
 * durable: a record cleared before that could outlive a commit that a
 * crash then undoes, and its units would stay taken with nothing to say
 * so.  They are copied out of the transaction's memory; their connections
 * stay pinned.
 */
static void
await_flush(dlist_head *head)
{
	MemoryContext oldcxt;
	dlist_mutable_iter iter;

	if (awaiting_flush_cxt == NULL)
		awaiting_flush_cxt = AllocSetContextCreate(TopMemoryContext,
												   "redislock records awaiting flush",
												   ALLOCSET_SMALL_SIZES);
	oldcxt = MemoryContextSwitchTo(awaiting_flush_cxt);
	dlist_foreach_modify(iter, head)
	{
		PendingDecrement *decrement = dlist_container(PendingDecrement, node,
													  iter.cur);
		PendingDecrement *copy = palloc(sizeof(PendingDecrement));

		*copy = *decrement;
		stock_keys_init(&copy->keys, decrement->keys.stock,
						decrement->keys.stocklen, decrement->keys.prefixlen);
		copy->op_id = pstrdup(decrement->op_id);
		copy->buyer = NULL;
		copy->commit_end = XactLastCommitEnd;
		dlist_delete(&decrement->node);
		dlist_push_tail(&awaiting_flush, &copy->node);
	}
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Clear the records of committed decrements whose commit WAL has been
 * flushed since, and free what await_flush() copied; those still waiting
 * stay for a later end.
 */
static void
clear_flushed_records(void)
{
	XLogRecPtr	flushed;
	dlist_head	durable = DLIST_STATIC_INIT(durable);
	dlist_mutable_iter iter;

	if (dlist_is_empty(&awaiting_flush))
		return;
	flushed = GetFlushRecPtr(NULL);
	dlist_foreach_modify(iter, &awaiting_flush)
	{
		PendingDecrement *decrement = dlist_container(PendingDecrement, node,
													  iter.cur);

		if (decrement->commit_end > flushed)
			break;
		dlist_delete(&decrement->node);
		dlist_push_tail(&durable, &decrement->node);
	}
	if (dlist_is_empty(&durable))
		return;
	send_clears(&durable);
	dlist_foreach_modify(iter, &durable)
	{
		PendingDecrement *decrement = dlist_container(PendingDecrement, node,
													  iter.cur);

		forget_decrement(decrement);
		pfree(decrement->keys.stock);
		pfree(decrement->keys.records);
		pfree(decrement->keys.buyers);
		pfree(decrement->op_id);
		pfree(decrement);
	}
}

/*
 * At transaction end, decrements of a committed transaction are final:
 * their records are cleared once the commit is durable, at once when it is
 * synchronous (the clears go out with the next command, see send_clears()).
 * Those of a rolled-back one are given back.  Records that waited for an
 * earlier commit to be flushed go if it has been.
 */
void
stock_end_xact(RedisBatch *batch, bool commit)
{
	dlist_mutable_iter iter;

	clear_flushed_records();
	if (commit && !dlist_is_empty(&pending))
	{
		/* after a synchronous commit, without a look at shared memory */
		if (!XLogNeedsFlush(XactLastCommitEnd))
		{
			send_clears(&pending);
			dlist_foreach_modify(iter, &pending)
				forget_decrement(dlist_container(PendingDecrement, node,
												 iter.cur));
		}
		else
			await_flush(&pending);
	}
	dlist_foreach_modify(iter, &pending)
		queue_giveback(batch, dlist_container(PendingDecrement, node,
											  iter.cur));
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
