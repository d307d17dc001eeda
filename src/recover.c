/*-------------------------------------------------------------------------
 *
 * recover.c
 *		redis_stock_recover(): settle the decrements that their backends
 *		could not, after a crash or while Redis was unreachable.
 *
 * Every decrement leaves a record beside its stock, named after this
 * PostgreSQL cluster's system identifier, the ID of the (sub)transaction
 * that made it and a number.  That ID was durable before the decrement
 * reached Redis, so PostgreSQL knows its fate, also after a crash: the
 * records of committed transactions are cleared, those of transactions
 * that did not commit are given back (units and buyer), and those still in
 * progress are left.  Records of other clusters sharing the Redis are not
 * touched.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "access/transam.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/tuplestore.h"
#include "utils/xid8.h"

#include "redislock.h"

/* Keys looked at per SCAN */
#define SCAN_COUNT	"1000"

/* One record found, and what is done with it */
typedef struct FoundRecord
{
	StockKeys	keys;			/* the item's */
	char	   *field;			/* the record's operation id */
	FullTransactionId fxid;
	int64		qty;
	char	   *buyer;			/* NULL when none */
	const char *outcome;		/* committed, aborted, in progress, unknown */
} FoundRecord;

PG_FUNCTION_INFO_V1(redis_stock_recover);

/* A SCAN pattern matching s literally */
static void
append_glob_escaped(StringInfo buf, const char *s)
{
	for (; *s; s++)
	{
		if (strchr("*?[]\\", *s) != NULL)
			appendStringInfoChar(buf, '\\');
		appendStringInfoChar(buf, *s);
	}
}

/*
 * What PostgreSQL knows of a transaction: as pg_xact_status() says, or
 * "unknown" when its status is no longer kept.
 */
static const char *
transaction_outcome(FullTransactionId fxid)
{
	LOCAL_FCINFO(fcinfo, 1);
	Datum		status;

	InitFunctionCallInfoData(*fcinfo, NULL, 1, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = FullTransactionIdGetDatum(fxid);
	fcinfo->args[0].isnull = false;
	status = pg_xact_status(fcinfo);
	if (fcinfo->isnull)
		return "unknown";
	return text_to_cstring(DatumGetTextPP(status));
}

/*
 * Parse a record of this cluster: operation id "<system identifier>:<xid>:
 * <number>" and value "<quantity>[ <buyer>]".  False for records of other
 * clusters and for anything malformed.
 */
static bool
parse_record(const char *field, const char *value, uint64 sysid,
			 FoundRecord *record)
{
	char	   *end;
	uint64		field_sysid;
	uint64		xid;

	errno = 0;
	field_sysid = strtou64(field, &end, 10);
	if (errno != 0 || *end != ':' || field_sysid != sysid)
		return false;
	xid = strtou64(end + 1, &end, 10);
	if (errno != 0 || *end != ':')
		return false;
	record->fxid = FullTransactionIdFromU64(xid);
	record->qty = strtoi64(value, &end, 10);
	if (errno != 0 || end == value || (*end != '\0' && *end != ' '))
		return false;
	record->buyer = *end == ' ' ? pstrdup(end + 1) : NULL;
	record->field = pstrdup(field);
	return true;
}

/*
 * The records of this cluster in the records key of an item (an HGETALL
 * reply), appended to *records.
 */
static void
collect_records(const RedisCall *hgetall, const char *ops_key,
				int prefixlen, uint64 sysid, List **records)
{
	const char *marker = strstr(ops_key + prefixlen, "}:ops:");
	int			i;

	if (marker == NULL || hgetall->reply_type != REDIS_REPLY_ARRAY)
		return;
	for (i = 0; i + 1 < hgetall->nelements; i += 2)
	{
		FoundRecord *record = palloc0(sizeof(FoundRecord));
		char	   *stock_key = psprintf("%.*s%s", prefixlen, ops_key,
										 marker + strlen("}:ops:"));

		if (!parse_record(hgetall->elements[i], hgetall->elements[i + 1],
						  sysid, record))
			continue;
		stock_keys_init(&record->keys, stock_key, strlen(stock_key),
						prefixlen);
		record->outcome = transaction_outcome(record->fxid);
		*records = lappend(*records, record);
	}
}

/*
 * Settle records: give back those of transactions that did not commit,
 * clear those of committed ones, in one round trip.
 */
static void
settle_records(RedisConn *conn, List *records)
{
	RedisCall  *calls = palloc(sizeof(RedisCall) * Max(list_length(records), 1));
	int			ncalls = 0;
	ListCell   *lc;

	foreach(lc, records)
	{
		FoundRecord *record = lfirst(lc);
		RedisCall  *call = &calls[ncalls];

		if (strcmp(record->outcome, "aborted") == 0)
		{
			stock_keys_call(call, conn, &record->keys, &stock_giveback_script);
			redis_call_arg(call, record->field, strlen(record->field));
		}
		else if (strcmp(record->outcome, "committed") == 0)
			stock_clear_record_call(call, conn, &record->keys, record->field);
		else
			continue;
		ncalls++;
	}
	redis_run(calls, ncalls);
}

static void
put_record_row(ReturnSetInfo *rsinfo, const FoundRecord *record,
			   int prefixlen)
{
	Datum		values[5];
	bool		nulls[5] = {false};

	values[0] = PointerGetDatum(cstring_to_text_with_len(record->keys.stock + prefixlen,
														 record->keys.stocklen - prefixlen));
	values[1] = FullTransactionIdGetDatum(record->fxid);
	values[2] = Int64GetDatum(record->qty);
	if (record->buyer != NULL)
		values[3] = CStringGetTextDatum(record->buyer);
	else
		nulls[3] = true;
	values[4] = CStringGetTextDatum(record->outcome);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * Settle the records on one node, one SCAN page at a time, adding a row per
 * record found to the result.
 */
static void
recover_node(ReturnSetInfo *rsinfo, RedisConn *conn, RedisNode *node,
			 const char *pattern, int prefixlen, uint64 sysid)
{
	char	   *cursor = "0";

	do
	{
		RedisCall	scan;
		RedisCall  *reads;
		List	   *records = NIL;
		ListCell   *lc;
		int			i;

		redis_call_init(&scan, conn, NULL);
		redis_call_on_node(&scan, node);
		redis_call_arg(&scan, "SCAN", 4);
		redis_call_arg(&scan, cursor, strlen(cursor));
		redis_call_arg(&scan, "MATCH", 5);
		redis_call_arg(&scan, pattern, strlen(pattern));
		redis_call_arg(&scan, "COUNT", 5);
		redis_call_arg(&scan, SCAN_COUNT, strlen(SCAN_COUNT));
		redis_run(&scan, 1);
		if (scan.reply_type != REDIS_REPLY_ARRAY || scan.nelements < 1)
			redis_unexpected_reply(&scan, pattern, ERROR);
		cursor = scan.elements[0];

		reads = palloc(sizeof(RedisCall) * Max(scan.nelements - 1, 1));
		for (i = 1; i < scan.nelements; i++)
		{
			redis_call_init(&reads[i - 1], conn, NULL);
			redis_call_arg(&reads[i - 1], "HGETALL", 7);
			redis_call_arg(&reads[i - 1], scan.elements[i],
						   strlen(scan.elements[i]));
		}
		redis_run(reads, scan.nelements - 1);
		for (i = 1; i < scan.nelements; i++)
			collect_records(&reads[i - 1], scan.elements[i], prefixlen, sysid,
							&records);

		settle_records(conn, records);
		foreach(lc, records)
			put_record_row(rsinfo, lfirst(lc), prefixlen);
	} while (strcmp(cursor, "0") != 0);
}

/*
 * redis_stock_recover(): settle this cluster's decrement records on the
 * server of redislock.server (on every master of a Redis Cluster), and
 * return one row per record found: (key, xid, qty, buyer, outcome).
 * Records of transactions in progress, or whose status PostgreSQL no
 * longer keeps, are left as they are.
 */
Datum
redis_stock_recover(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RedisConn  *conn = redis_conn_current();
	int			prefixlen = strlen(conn->key_prefix);
	uint64		sysid = GetSystemIdentifier();
	StringInfoData pattern;
	RedisNode **masters;
	int			nmasters;
	int			i;

	stock_require_counter_server(conn);
	InitMaterializedSRF(fcinfo, 0);
	initStringInfo(&pattern);
	append_glob_escaped(&pattern, conn->key_prefix);
	appendStringInfoString(&pattern, "{*}:ops:*");

	nmasters = redis_conn_masters(conn, &masters);
	for (i = 0; i < nmasters; i++)
		recover_node(rsinfo, conn, masters[i], pattern.data, prefixlen, sysid);
	return (Datum) 0;
}
