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
 * Beside it, redis_stock_installation holds the random number that names
 * this installation in the operation ids of its decrements.
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
#include "utils/snapmgr.h"
#include "utils/xid8.h"

#include "redislock.h"

#define DECISIONS_TABLE		"redis_stock_decrements"
#define INSTALLATION_TABLE	"redis_stock_installation"

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
 * The table's OID, and the function in whose schema it was found, and the
 * installation's random number: looked up once, not at every decrement,
 * and forgotten when the relcache says either table may have changed (ALTER
 * EXTENSION UPDATE, or a DROP and CREATE EXTENSION, make them anew).
 */
static Oid	decisions_relid = InvalidOid;
static Oid	decisions_fn_oid = InvalidOid;
static Oid	installation_relid = InvalidOid;
static uint64 installation_id = 0;

static void
forget_decisions_relid(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == decisions_relid ||
		relid == installation_relid)
		decisions_relid = InvalidOid;
}

/* Complain that a table of the extension is missing: its SQL is older */
static void
report_missing_table(const char *relname)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_TABLE),
			 errmsg("table \"%s\" of extension redislock does not exist",
					relname),
			 errhint("Update the extension with ALTER EXTENSION redislock UPDATE.")));
}

/*
 * The random number that CREATE EXTENSION (or the update to 1.3) drew for
 * this installation, read from its one-row table.  It sets the operation
 * ids of this installation apart from those of an installation dropped
 * before, whose rows are gone with it; the database's OID sets apart those
 * of other databases, which a database copied from a template shares it
 * with.
 */
static uint64
read_installation_id(Oid relid)
{
	Relation	rel = table_open(relid, AccessShareLock);
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	TableScanDesc scan = table_beginscan(rel, snapshot, 0, NULL);
	HeapTuple	tuple = heap_getnext(scan, ForwardScanDirection);
	bool		isnull = true;
	Datum		id = 0;

	if (HeapTupleIsValid(tuple))
		id = heap_getattr(tuple, 1, RelationGetDescr(rel), &isnull);
	table_endscan(scan);
	UnregisterSnapshot(snapshot);
	table_close(rel, AccessShareLock);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("table \"%s\" of extension redislock is empty",
						INSTALLATION_TABLE),
				 errhint("Reinstall the extension with DROP EXTENSION and CREATE EXTENSION.")));
	return (uint64) DatumGetInt64(id);
}

/* The OID of the table in the schema of the function fn_oid */
static Oid
decisions_relid_of(Oid fn_oid)
{
	static bool callback_registered = false;
	Oid			nspid;
	Oid			relid;

	if (OidIsValid(decisions_relid) && decisions_fn_oid == fn_oid)
		return decisions_relid;
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(forget_decisions_relid, (Datum) 0);
		callback_registered = true;
	}
	nspid = get_func_namespace(fn_oid);
	relid = get_relname_relid(DECISIONS_TABLE, nspid);
	if (!OidIsValid(relid))
		report_missing_table(DECISIONS_TABLE);
	installation_relid = get_relname_relid(INSTALLATION_TABLE, nspid);
	if (!OidIsValid(installation_relid))
		report_missing_table(INSTALLATION_TABLE);
	installation_id = read_installation_id(installation_relid);
	decisions_fn_oid = fn_oid;
	decisions_relid = relid;
	return decisions_relid;
}

/* Open the table of the extension whose function fn_oid is, in its schema */
Relation
stock_decisions_open(Oid fn_oid, LOCKMODE lockmode)
{
	return table_open(decisions_relid_of(fn_oid), lockmode);
}

/*
 * The random number of the installation whose table rel is (opened by
 * stock_decisions_open(), which read it)
 */
uint64
stock_installation_id(Relation rel)
{
	Assert(RelationGetRelid(rel) == decisions_relid);
	return installation_id;
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
		row->tid = tuple->t_self;
		row->op_id = TextDatumGetCString(values[Anum_decisions_op - 1]);
		row->recordslen = VARSIZE_ANY_EXHDR(records);
		row->records = pnstrdup(VARDATA_ANY(records), row->recordslen);
		rows = lappend(rows, row);
	}
	table_endscan(scan);
	return rows;
}
