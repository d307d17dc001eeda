/*-------------------------------------------------------------------------
 *
 * compat.h
 *		What differs between the PostgreSQL versions that redislock builds
 *		on, 13 to 18, each difference guarded by the version that made it.
 *
 * The code is written for the newest version; what an older one lacks is
 * made here, the same way for every file (io/io.h includes this header, so
 * every file has it).  compat.c holds what needs more than a line.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_COMPAT_H
#define REDISLOCK_COMPAT_H

#include "access/htup.h"
#include "funcapi.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/relcache.h"

/* 14 moved the wait events out of pgstat.h */
#if PG_VERSION_NUM >= 140000
#include "utils/wait_event.h"
#else
#include "pgstat.h"
#endif

/* 14 declares each catalog's indexes in the catalog's header */
#if PG_VERSION_NUM < 140000
#include "catalog/indexing.h"
#endif

/* 16 moved the varlena macros out of postgres.h */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

/* 15 added a PRNG of its own; 13 and 14 seed random() in every backend */
#if PG_VERSION_NUM >= 150000
#include "common/pg_prng.h"
#define compat_random_fraction() pg_prng_double(&pg_global_prng_state)
#else
#define compat_random_fraction() \
	((double) random() / ((double) MAX_RANDOM_VALUE + 1))
#endif

/* 18 puts the noreturn specifier before the declaration */
#if PG_VERSION_NUM < 180000
#define pg_noreturn pg_attribute_noreturn()
#endif

/* 17 numbers a backend's PGPROC in MyProcNumber */
#if PG_VERSION_NUM < 170000
#define MyProcNumber (MyProc->pgprocno)
#endif

/* 14 renamed the default roles to predefined roles */
#if PG_VERSION_NUM < 140000
#define ROLE_PG_READ_ALL_STATS DEFAULT_ROLE_READ_ALL_STATS
#endif

/* 15 named the string-to-integer functions of every width */
#if PG_VERSION_NUM < 150000
#define strtoi64(str, endptr, base) ((int64) strtoll(str, endptr, base))
#define strtou64(str, endptr, base) ((uint64) strtoull(str, endptr, base))
#define MarkGUCPrefixReserved(prefix) EmitWarningsOnPlaceholders(prefix)
#define GetFlushRecPtr(insertTLI) GetFlushRecPtr()
extern int64 pg_strtoint64(const char *s);
extern void InitMaterializedSRF(FunctionCallInfo fcinfo, bits32 flags);
#endif

/* 14 made pg_ltoa() and pg_lltoa() return the length they wrote */
#if PG_VERSION_NUM >= 140000
#define compat_ltoa(value, buf) pg_ltoa(value, buf)
#define compat_lltoa(value, buf) pg_lltoa(value, buf)
#else
#define compat_ltoa(value, buf) (pg_ltoa(value, buf), (int) strlen(buf))
#define compat_lltoa(value, buf) (pg_lltoa(value, buf), (int) strlen(buf))
#endif

/* 14 added SHA-1 to the common code: 13 has the one of compat.c */
#define COMPAT_SHA1_LENGTH 20
extern void compat_sha1(const char *data, size_t len,
						uint8 digest[COMPAT_SHA1_LENGTH]);

/* 15 added a timeline getter that a standby's processes may call too */
#if PG_VERSION_NUM < 150000
#define GetWALInsertionTimeLine() ThisTimeLineID
#endif

/* 16 checks privileges on any kind of object with one function */
#if PG_VERSION_NUM < 160000
#define object_aclcheck(classid, objectid, roleid, mode) \
	(AssertMacro((classid) == ForeignServerRelationId), \
	 pg_foreign_server_aclcheck(objectid, roleid, mode))
#endif

extern void compat_request_shmem(void (*request) (void));
extern void compat_heap_update(Relation rel, ItemPointer otid,
							   HeapTuple tuple);
extern WaitEventSet *compat_wait_set(bool kept, int nevents);
extern uint32 redislock_wait_event(void);

#endif							/* REDISLOCK_COMPAT_H */
