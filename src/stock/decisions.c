/*-------------------------------------------------------------------------
 *
 * decisions.c
 *		The table redis_stock_decrements: a row per decrement that took
 *		units, written in the (sub)transaction that made it.
 *
 * The row commits, or vanishes, with the work that the decrement pays for,
 * so PostgreSQL's own commit decides whether a unit was sold, and no WAL
 * needs flushing before Redis is asked.  redis_stock_recover() judges a
 * record in Redis by its row, once the transaction that would have written
 * it has ended, and deletes the rows whose records are gone.
 *
 * The table is the extension's bookkeeping, as a catalog is PostgreSQL's:
 * it is written and read here with the heap routines, under no privilege
 * of the caller, who needs no grant on it.  It has no index: a decrement
 * writes its row and nothing more, and the rare readers read it through.
 * Its OID, beside the database's, names the installation in the operation
 * ids of its decrements, so that only the recovery that can read their rows
 * judges them by their rows.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/table.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "utils/xid8.h"

#include "stock/stock.h"

#define DECISIONS_TABLE		"redis_stock_decrements"

/* The columns of redis_stock_decrements */
enum
{
	Anum_decisions_xid = 1,		/* the (sub)transaction of the decrement */
	Anum_decisions_op,			/* its operation id */
	Anum_decisions_server,		/* the foreign server of its item */
	Anum_decisions_records,		/* the Redis key of its item's records */
	Anum_decisions_gone_since,	/* when its record was first found gone */
	Natts_decisions = Anum_decisions_gone_since
};

/*
 * The table's OID, and the function in whose schema it was found: looked
 * up once, not at every decrement, and forgotten when the relcache says
 * the table may have changed (ALTER EXTENSION UPDATE, or a DROP and CREATE
 * EXTENSION, make it anew).
 */
static Oid	decisions_relid = InvalidOid;
static Oid	decisions_fn_oid = InvalidOid;

static void
forget_decisions_relid(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == decisions_relid)
		decisions_relid = InvalidOid;
}

/*
 * The OID of the table in the schema of the function fn_oid.  The table of
 * 1.1 (there is none) and that of 1.2 (it has no gone_since) are refused
 * with a hint, before anything is asked of Redis.
 */
static Oid
decisions_relid_of(Oid fn_oid)
{
	static bool callback_registered = false;
	Oid			nspid;

	if (OidIsValid(decisions_relid) && decisions_fn_oid == fn_oid)
		return decisions_relid;
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(forget_decisions_relid, (Datum) 0);
		callback_registered = true;
	}
	nspid = get_func_namespace(fn_oid);
	decisions_relid = get_relname_relid(DECISIONS_TABLE, nspid);
	decisions_fn_oid = fn_oid;
	if (!OidIsValid(decisions_relid) ||
		get_attnum(decisions_relid, "gone_since") != Anum_decisions_gone_since)
	{
		decisions_relid = InvalidOid;
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension redislock needs an update to use Redis stock"),
				 errdetail("Table \"%s\" is missing or older than this library.",
						   DECISIONS_TABLE),
				 errhint("Update the extension with ALTER EXTENSION redislock UPDATE.")));
	}
	return decisions_relid;
}

/*
 * Open the table of the extension whose function fn_oid is, in its schema.
 * Its OID names this installation of the extension in the operation ids of
 * its decrements: one created again after DROP EXTENSION gets another.
 */
Relation
stock_decisions_open(Oid fn_oid, LOCKMODE lockmode)
{
	return table_open(decisions_relid_of(fn_oid), lockmode);
}

/*
 * Write the row of a decrement that took units, in the current
 * (sub)transaction, into rel (opened by stock_decisions_open()).  The heap
 * routine inserts the row without the executor, and so without checking
 * the caller's privileges; the table has no index to keep up.
 */
void
stock_decision_insert(Relation rel, FullTransactionId fxid, const char *op_id,
					  Oid serverid, const char *records, int recordslen)
{
	Datum		values[Natts_decisions];
	bool		nulls[Natts_decisions] = {false};
	bytea	   *records_datum = palloc(VARHDRSZ + recordslen);
	HeapTuple	tuple;

	SET_VARSIZE(records_datum, VARHDRSZ + recordslen);
	memcpy(VARDATA(records_datum), records, recordslen);
	values[Anum_decisions_xid - 1] = FullTransactionIdGetDatum(fxid);
	values[Anum_decisions_op - 1] = CStringGetTextDatum(op_id);
	values[Anum_decisions_server - 1] = ObjectIdGetDatum(serverid);
	values[Anum_decisions_records - 1] = PointerGetDatum(records_datum);
	nulls[Anum_decisions_gone_since - 1] = true;
	tuple = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	simple_heap_insert(rel, tuple);
	heap_freetuple(tuple);
}

/* An operation asked about, and where its answer goes */
typedef struct AskedOp
{
	const char *op_id;
	bool	   *seen;
} AskedOp;

static int
compare_asked_ops(const void *a, const void *b)
{
	return strcmp(((const AskedOp *) a)->op_id, ((const AskedOp *) b)->op_id);
}

/*
 * Which of the operations op_ids[0 .. nops - 1] have a row that snapshot
 * sees?  seen[i] says it for op_ids[i].  The table has no index, so that a
 * decrement writes no more than its row: it is read through once for all
 * the operations asked about.
 */
void
stock_decisions_seen(Relation rel, Snapshot snapshot, char **op_ids,
					 int nops, bool *seen)
{
	AskedOp    *asked = palloc(sizeof(AskedOp) * nops);
	TableScanDesc scan;
	HeapTuple	tuple;
	int			i;

	for (i = 0; i < nops; i++)
	{
		asked[i].op_id = op_ids[i];
		asked[i].seen = &seen[i];
		seen[i] = false;
	}
	qsort(asked, nops, sizeof(AskedOp), compare_asked_ops);
	scan = table_beginscan(rel, snapshot, 0, NULL);
	while (HeapTupleIsValid(tuple = heap_getnext(scan, ForwardScanDirection)))
	{
		bool		isnull;
		Datum		op = heap_getattr(tuple, Anum_decisions_op,
									  RelationGetDescr(rel), &isnull);
		AskedOp		key;
		AskedOp    *found;

		if (isnull)
			continue;
		key.op_id = TextDatumGetCString(op);
		found = bsearch(&key, asked, nops, sizeof(AskedOp), compare_asked_ops);
		/* mark every record with this id, should two items have one */
		while (found != NULL && found > asked &&
			   compare_asked_ops(found - 1, &key) == 0)
			found--;
		while (found != NULL && found < asked + nops &&
			   compare_asked_ops(found, &key) == 0)
			*(found++)->seen = true;
		pfree((char *) key.op_id);
	}
	table_endscan(scan);
	pfree(asked);
}

/*
 * The rows of server that snapshot sees, as a List of StockDecision, in
 * the current memory context
 */
List *
stock_decisions_of_server(Relation rel, Snapshot snapshot, Oid serverid)
{
	TableScanDesc scan = table_beginscan(rel, snapshot, 0, NULL);
	TupleDesc	desc = RelationGetDescr(rel);
	HeapTuple	tuple;
	List	   *rows = NIL;

	while (HeapTupleIsValid(tuple = heap_getnext(scan, ForwardScanDirection)))
	{
		bool		isnull[Natts_decisions];
		Datum		values[Natts_decisions];
		StockDecision *row;
		bytea	   *records;

		heap_deform_tuple(tuple, desc, values, isnull);
		if (DatumGetObjectId(values[Anum_decisions_server - 1]) != serverid)
			continue;
		records = DatumGetByteaPP(values[Anum_decisions_records - 1]);
		row = palloc(sizeof(StockDecision));
		row->tuple = heap_copytuple(tuple);
		row->gone_since = isnull[Anum_decisions_gone_since - 1] ? 0 :
			DatumGetTimestampTz(values[Anum_decisions_gone_since - 1]);
		row->op_id = TextDatumGetCString(values[Anum_decisions_op - 1]);
		row->recordslen = VARSIZE_ANY_EXHDR(records);
		row->records = pnstrdup(VARDATA_ANY(records), row->recordslen);
		rows = lappend(rows, row);
	}
	table_endscan(scan);
	return rows;
}

/*
 * Note in the row when its record was first found gone from Redis, or,
 * with 0, that the record is there again
 */
void
stock_decision_set_gone_since(Relation rel, const StockDecision *row,
							  TimestampTz gone_since)
{
	Datum		values[Natts_decisions] = {0};
	bool		nulls[Natts_decisions] = {false};
	bool		replace[Natts_decisions] = {false};
	HeapTuple	tuple;

	values[Anum_decisions_gone_since - 1] = TimestampTzGetDatum(gone_since);
	nulls[Anum_decisions_gone_since - 1] = gone_since == 0;
	replace[Anum_decisions_gone_since - 1] = true;
	tuple = heap_modify_tuple(row->tuple, RelationGetDescr(rel), values,
							  nulls, replace);
	compat_heap_update(rel, &row->tuple->t_self, tuple);
	heap_freetuple(tuple);
}
