/*-------------------------------------------------------------------------
 *
 * compat.c
 *		What an older PostgreSQL lacks that takes more than a line of
 *		compat.h, and what each version does its own way.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/tuplestore.h"

#if PG_VERSION_NUM >= 140000
#include "common/cryptohash.h"
#include "common/sha1.h"
#endif
#if PG_VERSION_NUM < 150000
#include "utils/int8.h"
#endif

#include "compat.h"

#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static void (*shmem_requester) (void) = NULL;

static void
call_shmem_requester(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	shmem_requester();
}
#endif

/*
 * Have request ask for the library's shared memory and LWLocks: from 15 on
 * in the hook made for it, before that at once, from _PG_init.
 */
void
compat_request_shmem(void (*request) (void))
{
#if PG_VERSION_NUM >= 150000
	shmem_requester = request;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = call_shmem_requester;
#else
	request();
#endif
}

/*
 * Update a tuple of a table that has no index, as simple_heap_update()
 * does, which from 16 on also says whether indexes need new entries
 */
void
compat_heap_update(Relation rel, ItemPointer otid, HeapTuple tuple)
{
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes;

	simple_heap_update(rel, otid, tuple, &update_indexes);
#else
	simple_heap_update(rel, otid, tuple);
#endif
}

/*
 * A wait set with room for nevents events.  A kept one lives until it is
 * freed, across transactions.  From 17 on, any other is tracked by the
 * current resource owner, which closes its descriptor should an ERROR
 * come first; before 17 it lives in the current memory context, which
 * frees its memory only.
 */
WaitEventSet *
compat_wait_set(bool kept, int nevents)
{
#if PG_VERSION_NUM >= 170000
	return CreateWaitEventSet(kept ? NULL : CurrentResourceOwner, nevents);
#else
	return CreateWaitEventSet(kept ? TopMemoryContext : CurrentMemoryContext,
							  nevents);
#endif
}

/*
 * The wait event that redislock's waits report.  From 17 on it has a name
 * of its own, "RedisLock", which lives in shared memory: it is made at the
 * first wait of each process, never in the postmaster.
 */
uint32
redislock_wait_event(void)
{
#if PG_VERSION_NUM >= 170000
	static uint32 wait_event = 0;

	if (wait_event == 0)
		wait_event = WaitEventExtensionNew("RedisLock");
	return wait_event;
#else
	return PG_WAIT_EXTENSION;
#endif
}

#if PG_VERSION_NUM >= 140000

/* SHA-1 digest of data, as Redis computes it for EVALSHA */
void
compat_sha1(const char *data, size_t len, uint8 digest[COMPAT_SHA1_LENGTH])
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA1);

	if (ctx == NULL ||
		pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0 ||
		pg_cryptohash_final(ctx, digest, COMPAT_SHA1_LENGTH) < 0)
		elog(ERROR, "could not compute a SHA-1 digest");
	pg_cryptohash_free(ctx);
}

#else

static inline uint32
rotate_left(uint32 word, int bits)
{
	return (word << bits) | (word >> (32 - bits));
}

/* Mix one 64-byte block into the state, as FIPS 180-4 section 6.1.2 says */
static void
sha1_block(uint32 state[5], const uint8 *block)
{
	uint32		w[80];
	uint32		a = state[0],
				b = state[1],
				c = state[2],
				d = state[3],
				e = state[4];
	int			t;

	for (t = 0; t < 16; t++)
		w[t] = (uint32) block[t * 4] << 24 | (uint32) block[t * 4 + 1] << 16 |
			(uint32) block[t * 4 + 2] << 8 | (uint32) block[t * 4 + 3];
	for (t = 16; t < 80; t++)
		w[t] = rotate_left(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
	for (t = 0; t < 80; t++)
	{
		uint32		f,
					k,
					temp;

		if (t < 20)
		{
			f = (b & c) | (~b & d);
			k = 0x5a827999;
		}
		else if (t < 40)
		{
			f = b ^ c ^ d;
			k = 0x6ed9eba1;
		}
		else if (t < 60)
		{
			f = (b & c) | (b & d) | (c & d);
			k = 0x8f1bbcdc;
		}
		else
		{
			f = b ^ c ^ d;
			k = 0xca62c1d6;
		}
		temp = rotate_left(a, 5) + f + e + k + w[t];
		e = d;
		d = c;
		c = rotate_left(b, 30);
		b = a;
		a = temp;
	}
	state[0] += a;
	state[1] += b;
	state[2] += c;
	state[3] += d;
	state[4] += e;
}

/*
 * SHA-1 digest of data, as Redis computes it for EVALSHA.  13 has no SHA-1
 * of its own outside OpenSSL, which it may be built without.
 */
void
compat_sha1(const char *data, size_t len, uint8 digest[COMPAT_SHA1_LENGTH])
{
	uint32		state[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476,
	0xc3d2e1f0};
	uint8		tail[128] = {0};
	size_t		full = len - len % 64;
	size_t		taillen;
	uint64		bits = (uint64) len * 8;
	size_t		i;

	for (i = 0; i < full; i += 64)
		sha1_block(state, (const uint8 *) data + i);

	/* the rest, a 1 bit, zeros and the length in bits fill one or two blocks */
	memcpy(tail, data + full, len - full);
	tail[len - full] = 0x80;
	taillen = len - full < 56 ? 64 : 128;
	for (i = 0; i < 8; i++)
		tail[taillen - 1 - i] = (uint8) (bits >> (i * 8));
	for (i = 0; i < taillen; i += 64)
		sha1_block(state, tail + i);

	for (i = 0; i < COMPAT_SHA1_LENGTH; i++)
		digest[i] = (uint8) (state[i / 4] >> (24 - (i % 4) * 8));
}

#endif

#if PG_VERSION_NUM < 150000

/* A bigint from a decimal string, which must be one, as 15's function does */
int64
pg_strtoint64(const char *s)
{
	int64		result;

	(void) scanint8(s, false, &result);
	return result;
}

/*
 * Make the tuplestore of a set-returning function that materializes its
 * rows, as 15's function does for flags 0
 */
void
InitMaterializedSRF(FunctionCallInfo fcinfo, bits32 flags)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext oldcontext;
	TupleDesc	tupdesc;

	Assert(flags == 0);
	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		!(rsinfo->allowedModes & SFRM_Materialize))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	oldcontext = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = tuplestore_begin_heap(true, false, work_mem);
	rsinfo->setDesc = CreateTupleDescCopy(tupdesc);
	MemoryContextSwitchTo(oldcontext);
}

#endif
