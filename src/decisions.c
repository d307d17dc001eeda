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
 * it is written and read here with the heap and index routines, under no
 * privilege of the caller, who needs no grant on it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/xid8.h"

#include "redislock.h"

#define DECISIONS_TABLE		"redis_stock_decrements"

/* The columns of redis_stock_decrements */
enum
{
	Anum_decisions_xid = 1,		/* the (sub)transaction of the decrement */
	Anum_decisions_op,			/* its operation id */
	Anum_decisions_server,		/* the foreign server of its item */
	Anum_decisions_records,		/* the Redis key of its item's records */
	Natts_decisions = Anum_decisions_records
};

/*
 * Open the table of the extension whose function fn_oid is, in its schema.
 * The table is looked up at every use: ALTER EXTENSION UPDATE, or a DROP
 * and CREATE EXTENSION, may have made it anew.
 */
Relation
stock_decisions_open(Oid fn_oid, LOCKMODE lockmode)
{
	Oid			nspid = get_func_namespace(fn_oid);
	Oid			relid = get_relname_relid(DECISIONS_TABLE, nspid);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("table \"%s\" of extension redislock does not exist",
						DECISIONS_TABLE),
				 errhint("Update the extension with ALTER EXTENSION redislock UPDATE.")));
	return table_open(relid, lockmode);
}

/*
 * Write the row of a decrement that took units, in the current
 * (sub)transaction, into rel (opened by stock_decisions_open()).  The
 * catalog routine inserts the row and its index entries without the
 * executor, and so without checking the caller's privileges.
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
	tuple = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	CatalogTupleInsert(rel, tuple);
	heap_freetuple(tuple);
}

/*
 * Does snapshot see the row of operation op_id, made by fxid?  The rows are
 * found through the index on xid, the table's only one.
 */
bool
stock_decision_exists(Relation rel, Snapshot snapshot, FullTransactionId fxid,
					  const char *op_id)
{
	List	   *indexes = RelationGetIndexList(rel);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	bool		found = false;

	ScanKeyInit(&key, Anum_decisions_xid, BTEqualStrategyNumber, F_XID8EQ,
				FullTransactionIdGetDatum(fxid));
	scan = systable_beginscan(rel, list_length(indexes) == 1
							  ? linitial_oid(indexes) : InvalidOid,
							  list_length(indexes) == 1, snapshot, 1, &key);
	while (!found && HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		bool		isnull;
		Datum		op = heap_getattr(tuple, Anum_decisions_op,
									  RelationGetDescr(rel), &isnull);

		found = !isnull && strcmp(TextDatumGetCString(op), op_id) == 0;
	}
	systable_endscan(scan);
	list_free(indexes);
	return found;
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
		row->tid = tuple->t_self;
		row->op_id = TextDatumGetCString(values[Anum_decisions_op - 1]);
		row->recordslen = VARSIZE_ANY_EXHDR(records);
		row->records = pnstrdup(VARDATA_ANY(records), row->recordslen);
		rows = lappend(rows, row);
	}
	table_endscan(scan);
	return rows;
}
