/*-------------------------------------------------------------------------
 *
 * recover.c
 *		redis_stock_recover(): settle the decrements that their backends
 *		could not, after a crash or while Redis was unreachable.
 *
 * Every decrement leaves a record beside its stock, named after this
 * PostgreSQL cluster's system identifier, its timeline, the database and
 * the table (of this installation of the extension) that holds its row,
 * the ID of the (sub)transaction that made it and a number unique to it.
 * A decrement that took units wrote a row under the same id in the same
 * (sub)transaction (decisions.c), so once that transaction has ended, the
 * row is there if and only if it committed: the records of committed
 * decrements are cleared, once their commit is durable (a backend's own
 * clear goes out with its next command, and is lost if its connection
 * fails first: such records are found here, beside their rows); those of
 * decrements that did not commit are given back (units and buyer); those
 * of transactions still running are left.  The transaction ID only says
 * whose end to wait for: an ID handed out again after a crash, to a
 * transaction still running, only delays the verdict.  Only the
 * installation that wrote a record may judge it by its rows: several
 * databases of a cluster may share one Redis and one key prefix, and an
 * installation dropped and created again has lost the rows of the one
 * before.  Records of 1.1 and 1.2, which name no database, are decided by
 * their transaction's status, which every database shares.  Rows whose
 * records are gone are deleted.
 *
 * A transaction ID names one transaction only within one history.  PITR, a
 * promoted standby and a copy of the data directory keep the system
 * identifier while their transaction IDs go their own ways, so only records
 * of this cluster's current timeline are decided (those of 1.1 only for IDs
 * it has assigned).  The rest are left in Redis and reported.  Records of
 * other clusters sharing the Redis are not touched.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include <hiredis/hiredis.h>

#include "access/heapam.h"
#include "access/table.h"
#include "access/transam.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/procarray.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "utils/xid8.h"

#include "guc.h"
#include "scripts.h"
#include "stock/stock.h"

/* Keys looked at per SCAN */
#define SCAN_COUNT	"1000"

/* Rows whose records are looked for in one round trip */
#define PURGE_BATCH	1000

/* One record found, and what is done with it */
typedef struct FoundRecord
{
	StockKeys	keys;			/* the item's */
	char	   *field;			/* the record's operation id */
	TimeLineID	tli;			/* 0 for a record of 1.1, which names none */
	Oid			dboid;			/* InvalidOid for a record of 1.1 or 1.2,
								 * which name no database */
	Oid			table;			/* and the table of decisions that holds its
								 * row (1.3) */
	FullTransactionId fxid;
	int64		qty;
	char	   *buyer;			/* NULL when none */
	const char *outcome;		/* see redis_stock_recover(); NULL while its
								 * row is still to be looked for */
} FoundRecord;

/* What one run decides by, and what it could not settle */
typedef struct RecoverRun
{
	ReturnSetInfo *rsinfo;
	RedisConn  *conn;
	Relation	decisions;		/* redis_stock_decrements */
	int			prefixlen;
	uint64		sysid;
	TimeLineID	tli;			/* this cluster's timeline */
	TimeLineID	legacy_tli;		/* that of the records of 1.1, 0 if unknown */
	Oid			table;			/* the OID of decisions, which names this
								 * installation in operation ids */
	int			nfailed;		/* records whose settling Redis refused */
	char	   *failed_key;		/* the first of them: its item */
	char	   *failed_endpoint;	/* and where, and what, Redis answered */
	char	   *failed_reply;
} RecoverRun;

PG_FUNCTION_INFO_V1(redis_stock_recover);

/*
 * What PostgreSQL knows of a transaction: as pg_xact_status() says, or
 * "unknown" when its status is no longer kept.  The ID must precede the
 * next one to be assigned, or pg_xact_status() fails.
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
 * The timeline on which the records of 1.1, which name none, were made:
 * the one that ALTER EXTENSION UPDATE from 1.1 noted, or 0 when none was
 * noted (a fresh install, or a database not updated yet).  The table is
 * the extension's, in the schema of the function running.
 */
static TimeLineID
legacy_timeline(Oid fn_oid)
{
	Oid			nspid = get_func_namespace(fn_oid);
	TimeLineID	tli = 0;
	bool		isnull;
	Datum		value;

	if (!OidIsValid(get_relname_relid("redis_stock_legacy_timeline", nspid)))
		return 0;
	SPI_connect();
	if (SPI_execute(psprintf("SELECT timeline FROM %s.redis_stock_legacy_timeline",
							 quote_identifier(get_namespace_name(nspid))),
					true, 1) == SPI_OK_SELECT && SPI_processed == 1)
	{
		value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
							  &isnull);
		if (!isnull && DatumGetInt32(value) > 0)
			tli = DatumGetInt32(value);
	}
	SPI_finish();
	return tli;
}

/*
 * Read the unsigned decimal number at *s, which ends at a ':' or at the end
 * of the string, and move *s past it and its ':'.  False when there is none.
 */
static bool
next_number(const char **s, uint64 *value, bool *last)
{
	char	   *end;

	if (!isdigit((unsigned char) **s))
		return false;
	errno = 0;
	*value = strtou64(*s, &end, 10);
	if (errno != 0 || (*end != ':' && *end != '\0'))
		return false;
	*last = *end == '\0';
	*s = *last ? end : end + 1;
	return true;
}

/*
 * Parse a record of this cluster: operation id "<system identifier>:
 * <timeline>:<database>:<table>:<xid>:<number>", as 1.2 wrote it
 * "<system identifier>:<timeline>:<xid>:<number>", or as 1.1 did
 * "<system identifier>:<xid>:<number>"; and value "<quantity>[ <buyer>]".
 * False for records of other clusters and for anything malformed.
 */
static bool
parse_record(const char *field, const char *value, uint64 sysid,
			 FoundRecord *record)
{
	const char *s = field;
	uint64		numbers[6];
	int			n = 0;
	bool		last = false;
	char	   *end;

	while (!last && n < lengthof(numbers))
		if (!next_number(&s, &numbers[n++], &last))
			return false;
	if (!last || n < 3 || n == 5 || numbers[0] != sysid)
		return false;
	if (n >= 4 && (numbers[1] == 0 || numbers[1] > PG_UINT32_MAX))
		return false;
	if (n == 6 && (numbers[2] == InvalidOid || numbers[2] > PG_UINT32_MAX ||
				   numbers[3] == InvalidOid || numbers[3] > PG_UINT32_MAX))
		return false;
	record->tli = n >= 4 ? (TimeLineID) numbers[1] : 0;
	record->dboid = n == 6 ? (Oid) numbers[2] : InvalidOid;
	record->table = n == 6 ? (Oid) numbers[3] : InvalidOid;
	record->fxid = FullTransactionIdFromU64(numbers[n - 2]);
	if (!TransactionIdIsNormal(XidFromFullTransactionId(record->fxid)))
		return false;

	errno = 0;
	record->qty = strtoi64(value, &end, 10);
	if (errno != 0 || end == value || (*end != '\0' && *end != ' '))
		return false;
	record->buyer = *end == ' ' ? pstrdup(end + 1) : NULL;
	record->field = pstrdup(field);
	return true;
}

/*
 * Might the (sub)transaction fxid still be running?  Not if its ID has not
 * been handed out here (since a crash that lost it, say), nor if it is 2^31
 * or more behind the next one: it is long over, and its 32 bits may name a
 * running transaction now.
 */
static bool
writer_may_run(FullTransactionId fxid)
{
	FullTransactionId next = ReadNextFullTransactionId();

	return FullTransactionIdPrecedes(fxid, next) &&
		U64FromFullTransactionId(next) - U64FromFullTransactionId(fxid) <
		(UINT64CONST(1) << 31) &&
		TransactionIdIsInProgress(XidFromFullTransactionId(fxid));
}

/*
 * Decide a record that names no database, as 1.1 and 1.2 wrote them, by
 * its transaction's status, which is the same in every database of the
 * cluster (the row of a record of 1.2 may be in another database, and its
 * absence here proves nothing).  A record of 1.1 whose ID has not been
 * assigned here yet is left ("future").  The writer of a record of 1.2
 * whose ID is beyond the next one here is one whose ID a crash lost before
 * any WAL of it was flushed: it did not commit.  An ID that a crash lost
 * and that was handed out again makes a record of 1.2 wait for the new
 * holder, and be cleared if that one commits: a unit may be undersold,
 * never oversold.
 */
static const char *
decide_by_status(FullTransactionId fxid, bool legacy)
{
	if (FullTransactionIdPrecedes(fxid, ReadNextFullTransactionId()))
		return transaction_outcome(fxid);
	return legacy ? "future" : "aborted";
}

/*
 * Decide a record as far as its transaction ID allows.  Only records of
 * this cluster's timeline are decided: on another one (left by PITR or a
 * promotion, or branched off this one) the same ID may belong to another
 * transaction, and a transaction in progress where the histories split may
 * have ended otherwise on the other side.  Records of 1.1 are decided only
 * on the timeline that the update from 1.1 noted, and those of 1.1 and 1.2
 * by their transaction's status.  A record of 1.3 is decided only by the
 * installation that wrote it, whose table holds its row: records of
 * another database (its own recovery decides them) and of an installation
 * dropped since (whose table went with its rows) are left alone.  It is
 * "in progress" while its writer may run, and is decided by its row after
 * that (NULL): a writer whose ID is beyond the next one here is not
 * running either, it is one whose ID a crash lost before any WAL of it was
 * flushed, and it did not commit.
 */
static const char *
decide_record(const RecoverRun *run, const FoundRecord *record)
{
	if (record->tli == 0 && run->legacy_tli != run->tli)
		return "unknown timeline";
	if (record->tli != 0 && record->tli != run->tli)
		return "other timeline";
	if (!OidIsValid(record->dboid))
		return decide_by_status(record->fxid, record->tli == 0);
	if (record->dboid != MyDatabaseId)
		return "other database";
	if (record->table != run->table)
		return "other installation";
	if (writer_may_run(record->fxid))
		return "in progress";
	return NULL;
}

/*
 * Decide the records whose writers had ended by their rows, read in one
 * pass.  The snapshot is taken after every writer was found to have ended,
 * so a writer that committed before that is seen committed: PostgreSQL
 * marks a transaction committed before it stops counting as running.
 */
static void
decide_by_rows(const RecoverRun *run, List *records)
{
	FoundRecord **undecided = palloc(sizeof(FoundRecord *) * list_length(records));
	char	  **op_ids = palloc(sizeof(char *) * list_length(records));
	bool	   *seen = palloc(sizeof(bool) * list_length(records));
	int			nundecided = 0;
	Snapshot	snapshot;
	ListCell   *lc;
	int			i;

	foreach(lc, records)
	{
		FoundRecord *record = lfirst(lc);

		if (record->outcome != NULL)
			continue;
		undecided[nundecided] = record;
		op_ids[nundecided++] = record->field;
	}
	if (nundecided == 0)
		return;
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	stock_decisions_seen(run->decisions, snapshot, op_ids, nundecided, seen);
	UnregisterSnapshot(snapshot);
	for (i = 0; i < nundecided; i++)
		undecided[i]->outcome = seen[i] ? "committed" : "aborted";
}

/*
 * The records of this cluster in the records key of an item (an HGETALL
 * reply), decided and appended to *records.
 */
static void
collect_records(const RecoverRun *run, const RedisCall *hgetall,
				const char *records_key, List **records)
{
	int			stock_keylen;
	char	   *stock_key = redis_sibling_owner(records_key,
												strlen(records_key),
												run->prefixlen,
												REDIS_SIBLING_RECORDS,
												&stock_keylen);
	int			i;

	if (stock_key == NULL || hgetall->reply_type != REDIS_REPLY_ARRAY)
		return;
	for (i = 0; i + 1 < hgetall->nelements; i += 2)
	{
		FoundRecord *record = palloc0(sizeof(FoundRecord));

		if (!parse_record(hgetall->elements[i], hgetall->elements[i + 1],
						  run->sysid, record))
			continue;
		stock_keys_init(&record->keys, stock_key, stock_keylen,
						run->prefixlen);
		record->outcome = decide_record(run, record);
		*records = lappend(*records, record);
	}
}

/*
 * A settling call has run.  Any integer reply means the record is settled:
 * a give-back answers 1 (given back), 0 (the item was deleted, there is
 * nothing to give back to) or -1 (someone settled it first), a clear how
 * many records it deleted.  Anything else left the record in Redis: its
 * row says so, and the first such answer is kept for the warning.
 */
static void
settle_done(RecoverRun *run, RedisCall *call, FoundRecord *record)
{
	if (call->reply_type == REDIS_REPLY_INTEGER)
	{
		if (call->integer == 1 && strcmp(record->outcome, "aborted") == 0)
			redis_count(run->conn, REDIS_STAT_RECOVERED, 1);
		return;
	}
	record->outcome = strcmp(record->outcome, "aborted") == 0
		? "give-back failed" : "clear failed";
	if (run->nfailed++ > 0)
		return;
	run->failed_key = pnstrdup(record->keys.stock + run->prefixlen,
							   record->keys.stocklen - run->prefixlen);
	run->failed_endpoint = pstrdup(call->node->endpoint);
	run->failed_reply = call->reply_type == REDIS_REPLY_ERROR
		? pstrdup(call->str)
		: psprintf("a reply of type %d", call->reply_type);
}

/* Is any of the records (FoundRecord) that of a committed decrement? */
static bool
any_committed(List *records)
{
	ListCell   *lc;

	foreach(lc, records)
		if (strcmp(((FoundRecord *) lfirst(lc))->outcome, "committed") == 0)
			return true;
	return false;
}

/*
 * The end of the WAL inserted so far.  GetXLogInsertRecPtr() tells where
 * the next record goes, which on a page's first byte is past the page's
 * header: nothing ends there, and a flush asked to reach it fails.
 */
static XLogRecPtr
inserted_wal_end(void)
{
	XLogRecPtr	next = GetXLogInsertRecPtr();
	uint32		offset = next % XLOG_BLCKSZ;

	if (offset == SizeOfXLogShortPHD ||
		(offset == SizeOfXLogLongPHD &&
		 XLogSegmentOffset(next, wal_segment_size) == offset))
		return next - offset;
	return next;
}

/*
 * Settle records: give back those of transactions that did not commit,
 * clear those of committed ones, in one round trip.  A commit may not be
 * durable yet (synchronous_commit = off), and a record cleared before it is
 * could outlive the commit if a crash undid it, so WAL is flushed first, as
 * far as it was inserted.
 */
static void
settle_records(RecoverRun *run, List *records)
{
	RedisCall  *calls = palloc(sizeof(RedisCall) * Max(list_length(records), 1));
	int			ncalls = 0;
	ListCell   *lc;
	int			i;

	if (any_committed(records))
		XLogFlush(inserted_wal_end());

	foreach(lc, records)
	{
		FoundRecord *record = lfirst(lc);
		RedisCall  *call = &calls[ncalls];

		if (strcmp(record->outcome, "aborted") == 0)
		{
			stock_keys_call(call, run->conn, &record->keys,
							&stock_giveback_script);
			redis_call_arg(call, record->field, strlen(record->field));
		}
		else if (strcmp(record->outcome, "committed") == 0)
			stock_clear_record_call(call, run->conn, &record->keys,
									record->field);
		else
			continue;
		call->origin = record;
		ncalls++;
	}
	redis_run(calls, ncalls);
	for (i = 0; i < ncalls; i++)
		settle_done(run, &calls[i], calls[i].origin);
}

static void
put_record_row(const RecoverRun *run, const FoundRecord *record)
{
	Datum		values[5];
	bool		nulls[5] = {false};

	values[0] = PointerGetDatum(cstring_to_text_with_len(record->keys.stock + run->prefixlen,
														 record->keys.stocklen - run->prefixlen));
	values[1] = FullTransactionIdGetDatum(record->fxid);
	values[2] = Int64GetDatum(record->qty);
	if (record->buyer != NULL)
		values[3] = CStringGetTextDatum(record->buyer);
	else
		nulls[3] = true;
	values[4] = CStringGetTextDatum(record->outcome);
	tuplestore_putvalues(run->rsinfo->setResult, run->rsinfo->setDesc,
						 values, nulls);
}

/*
 * Settle the records on one node, one SCAN page at a time, adding a row per
 * record found to the result.
 */
static void
recover_node(RecoverRun *run, RedisNode *node, const char *pattern)
{
	char	   *cursor = "0";

	do
	{
		RedisCall	scan;
		RedisCall  *reads;
		List	   *records = NIL;
		ListCell   *lc;
		int			i;

		redis_call_init(&scan, run->conn, NULL);
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
			redis_call_init(&reads[i - 1], run->conn, NULL);
			redis_call_arg(&reads[i - 1], "HGETALL", 7);
			redis_call_arg(&reads[i - 1], scan.elements[i],
						   strlen(scan.elements[i]));
		}
		redis_run(reads, scan.nelements - 1);
		for (i = 1; i < scan.nelements; i++)
			collect_records(run, &reads[i - 1], scan.elements[i], &records);

		decide_by_rows(run, records);
		settle_records(run, records);
		foreach(lc, records)
			put_record_row(run, lfirst(lc));
	} while (strcmp(cursor, "0") != 0);
}

/*
 * Settle the row of a record that was looked for.  A record gone from Redis
 * was settled, and does not come back: the decrement that wrote it had run
 * before its row committed, and operation ids are never used twice.  Unless
 * Redis loses writes it acknowledged: a crash under appendfsync everysec,
 * or a failover to a replica that had not received them, may bring back a
 * record whose clear it had acknowledged, and with its row gone it would
 * be judged aborted.  So a row outlives the first sighting of its record's
 * absence by redislock.purge_delay, and a record seen again makes its row
 * wait anew.
 */
static void
purge_row(RecoverRun *run, const StockDecision *row, bool gone,
		  TimestampTz now)
{
	if (!gone)
	{
		if (row->gone_since != 0)
			stock_decision_set_gone_since(run->decisions, row, 0);
	}
	else if (redislock_purge_delay == 0 ||
			 (row->gone_since != 0 &&
			  TimestampDifferenceExceeds(row->gone_since, now,
										 redislock_purge_delay)))
		simple_heap_delete(run->decisions, &row->tuple->t_self);
	else if (row->gone_since == 0)
		stock_decision_set_gone_since(run->decisions, row, now);
}

/*
 * Look for the records of up to PURGE_BATCH rows in one round trip, and
 * settle their rows (purge_row()).  With min_replicas, a record counts as
 * gone only once that many replicas have seen it go.
 */
static void
purge_batch(RecoverRun *run, StockDecision **rows, int nrows)
{
	int			per_row = run->conn->min_replicas > 0 ? 2 : 1;
	RedisCall  *calls = palloc(sizeof(RedisCall) * nrows * per_row);
	TimestampTz now;
	int			i;

	for (i = 0; i < nrows; i++)
	{
		RedisCall  *call = &calls[i * per_row];

		redis_call_init(call, run->conn, NULL);
		call->slot = redis_key_slot(rows[i]->records, rows[i]->recordslen);
		redis_call_arg(call, "HEXISTS", 7);
		redis_call_arg(call, rows[i]->records, rows[i]->recordslen);
		redis_call_arg(call, rows[i]->op_id, strlen(rows[i]->op_id));
		if (per_row > 1)
			redis_call_wait_replicas(&calls[i * per_row + 1], call);
	}
	redis_run(calls, nrows * per_row);
	now = GetCurrentTimestamp();
	for (i = 0; i < nrows; i++)
	{
		RedisCall  *call = &calls[i * per_row];

		if (call->reply_type != REDIS_REPLY_INTEGER)
			continue;
		purge_row(run, rows[i], call->integer == 0 &&
				  (per_row == 1 || redis_replicas_acknowledged(call + 1)),
				  now);
	}
	pfree(calls);
}

/*
 * Delete the rows of this server whose records are gone from Redis (those
 * of decrements settled at commit or here), once they have been gone for
 * redislock.purge_delay.  Rows are read with a snapshot
 * taken after the records were settled.  Runs of recover wait for each
 * other (the table's lock), so no row is deleted twice.
 */
static void
purge_decisions(RecoverRun *run)
{
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	List	   *rows = stock_decisions_of_server(run->decisions, snapshot,
												 run->conn->serverid);
	StockDecision **batch = palloc(sizeof(StockDecision *) * PURGE_BATCH);
	int			nbatch = 0;
	ListCell   *lc;

	UnregisterSnapshot(snapshot);
	foreach(lc, rows)
	{
		batch[nbatch++] = lfirst(lc);
		if (nbatch == PURGE_BATCH || lnext(rows, lc) == NULL)
		{
			purge_batch(run, batch, nbatch);
			nbatch = 0;
		}
	}
}

/*
 * Deciding needs this cluster's own timeline and transaction status, which
 * a standby, still replaying another server's history, cannot vouch for.
 */
static void
require_primary(void)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("Redis stock cannot be recovered during recovery"),
				 errdetail("Records are decided by the timeline and transactions of the primary that made them."),
				 errhint("Run redis_stock_recover() on the primary.")));
}

/* Say that some records could not be settled, and why the first was not */
static void
report_failed_settles(const RecoverRun *run)
{
	if (run->nfailed == 0)
		return;
	ereport(WARNING,
			(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
			 errmsg_plural("%d decrement record of Redis stock on server \"%s\" was not settled",
						   "%d decrement records of Redis stock on server \"%s\" were not settled",
						   run->nfailed, run->nfailed, run->conn->servername),
			 errdetail("For the record of item \"%s\", Redis at %s answered: %s",
					   run->failed_key, run->failed_endpoint, run->failed_reply),
			 errhint("Their rows say \"give-back failed\" or \"clear failed\"; the records stay in Redis for the next run.")));
}

/*
 * redis_stock_recover(): settle this cluster's decrement records on the
 * server of redislock.server (on every master of a Redis Cluster), and
 * return one row per record found: (key, xid, qty, buyer, outcome).
 * Records are settled by the outcome of their transaction, "committed"
 * (cleared) or "aborted" (given back), and left as they are when it is
 * "in progress" or "unknown" (its status is no longer kept), when the
 * record cannot be decided here ("other timeline", "unknown timeline",
 * "future"), or when Redis refused to settle it ("give-back failed",
 * "clear failed").
 */
Datum
redis_stock_recover(PG_FUNCTION_ARGS)
{
	RecoverRun	run = {0};
	char	   *pattern;
	RedisNode **masters;
	int			nmasters;
	int			i;

	require_primary();
	PreventCommandIfReadOnly("redis_stock_recover()");
	run.rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	run.conn = redis_conn_current();
	run.prefixlen = strlen(run.conn->key_prefix);
	run.sysid = GetSystemIdentifier();
	run.tli = stock_current_timeline();
	run.legacy_tli = legacy_timeline(fcinfo->flinfo->fn_oid);

	stock_require_counter_server(run.conn);
	run.decisions = stock_decisions_open(fcinfo->flinfo->fn_oid,
										 ShareUpdateExclusiveLock);
	run.table = RelationGetRelid(run.decisions);
	InitMaterializedSRF(fcinfo, 0);
	pattern = redis_sibling_pattern(run.conn->key_prefix,
									REDIS_SIBLING_RECORDS);

	nmasters = redis_conn_masters(run.conn, &masters);
	for (i = 0; i < nmasters; i++)
		recover_node(&run, masters[i], pattern);
	report_failed_settles(&run);
	purge_decisions(&run);
	table_close(run.decisions, NoLock);
	return (Datum) 0;
}
