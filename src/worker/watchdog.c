/*-------------------------------------------------------------------------
 *
 * watchdog.c
 *		The lease watchdog: a database's background worker renews the
 *		leases of the Redis locks that backends there hold, while they hold
 *		them.
 *
 * A backend granted a lock with redislock.lease_renewal on publishes in
 * the shared lock table until when the lock may be renewed (its grant plus
 * redislock.lease_renewal_limit), and asks its database's worker for
 * renewal (request.c).  The worker copies the table, and renews each lease
 * a third of its ttl after its last renewal, by the holder or by the
 * worker, with the script that redis_lock_extend() runs: it resets the
 * lease only if the key still carries the holder's owner token.  All the
 * leases due, on every server, go out in one run of the batch, so that a
 * slow server delays no renewal on another, and on a Redlock server the
 * quorum decides and the lease is shortened by the drift its masters may
 * have, as for the holder's own calls.  A renewal uses the connection of
 * the user whose user mapping the holder used.
 *
 * A lease is renewed only for a holder that lives (its PGPROC still has
 * the pid of the entry) and for the entry copied (its id unchanged when
 * the renewal is noted), never for a holder that exited or a pid reused:
 * the lock then expires within its ttl.  Two renewals in a row that find
 * the key gone or another owner's (one could cross the holder's release),
 * a renewal confirmed too late, and a lease that ran out while its
 * renewals got no answer, mark the entry lost; the holder's check before
 * commit then fails.  Redis errors are logged and the renewal tried again
 * shortly, while the lease runs.
 *
 * Keys longer than an entry keeps (REDISLOCK_ENTRY_KEY_LEN) are not
 * renewed: the holder does not ask for it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "guc.h"
#include "lock/lock.h"
#include "stats.h"
#include "worker/worker.h"

/* A renewal that got no answer is tried again this much later (ms) */
#define RENEW_RETRY_MS		200

/*
 * A lease due for renewal within this fraction of its ttl is renewed with
 * those due now, so that renewals go out together rather than one by one
 */
#define RENEW_AHEAD_DIVISOR	12

/*
 * The entries whose last renewal found the key gone or another owner's.
 * A holder releasing its lock deletes the key before it frees the entry,
 * so a renewal sent meanwhile finds the key gone though nothing was lost:
 * a lease is taken for lost only when the next renewal, RENEW_RETRY_MS
 * later, finds the same, the entry still there.  Kept across runs, in
 * TopMemoryContext.
 */
static uint64 *suspects = NULL;
static int	nsuspects = 0;
static uint64 *next_suspects = NULL;
static int	next_nsuspects = 0;

/* A lease due, and what its renewal needs */
typedef struct Renewal
{
	const RedisLockEntry *entry;	/* a copy of its entry */
	LockTableRef ref;
	TimestampTz lease_end;		/* as last renewed */
	RedisConn  *conn;			/* NULL when none could be had */
	char	   *fence_key;
	int			fence_keylen;
	char	   *hold_fence;		/* the hold's fencing token, or NULL */
} Renewal;

/* When the lease of an entry runs out, as renewed last, by anyone */
static TimestampTz
lease_end_of(RedisLockEntry *entry)
{
	return Max(entry->state.lease_expires_at,
			   (TimestampTz) pg_atomic_read_u64(&entry->renewed_until));
}

/* When a lease that runs out at lease_end is due: two thirds before */
static TimestampTz
renewal_due(TimestampTz lease_end, int ttl_ms)
{
	return TimestampTzPlusMilliseconds(lease_end, -2 * (ttl_ms / 3));
}

/* Does the backend that the entry names still live? */
static bool
holder_lives(const RedisLockEntry *entry)
{
	return ProcGlobal->allProcs[entry->procno].pid == entry->pid;
}

/*
 * Is the entry, of this database, a lock whose lease the watchdog renews
 * now: held (a semaphore's holder may wait for more permits meanwhile),
 * renewal asked for and its limit not passed, not found lost, and its
 * holder alive?
 */
static bool
renewable(RedisLockEntry *entry, TimestampTz now)
{
	const RedisLockState *state = &entry->state;

	return state->session_holds + state->xact_holds > 0 &&
		state->renew_until != 0 && now < state->renew_until &&
		entry->key_complete &&
		pg_atomic_read_u32(&entry->lost) == 0 &&
		holder_lives(entry);
}

/* The order of renewals by server and user: one connection each */
static int
renewal_cmp(const void *a, const void *b)
{
	const RedisLockEntry *x = ((const Renewal *) a)->entry;
	const RedisLockEntry *y = ((const Renewal *) b)->entry;

	if (x->serverid != y->serverid)
		return x->serverid < y->serverid ? -1 : 1;
	if (x->userid != y->userid)
		return x->userid < y->userid ? -1 : 1;
	return 0;
}

/* Find the connection of each renewal, one per server and user */
static void
find_connections(Renewal *due, int ndue)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			i;

	qsort(due, ndue, sizeof(Renewal), renewal_cmp);
	StartTransactionCommand();
	MemoryContextSwitchTo(cxt);
	for (i = 0; i < ndue; i++)
		due[i].conn = i > 0 && renewal_cmp(&due[i - 1], &due[i]) == 0 ?
			due[i - 1].conn :
			redis_conn_for_worker(due[i].entry->serverid, due[i].entry->userid);
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
}

/*
 * The fencing token, in digits, that names the hold a renewal is for, NULL
 * for none.  The holder's owner token is the same for all its holds of a
 * key, and a renewal still on its way when the holder releases and takes
 * the key again must not stretch the new hold's lease to the old ttl.  The
 * fencing token is drawn anew at each grant; on a Redlock server each
 * master draws its own, and the entry keeps only the largest, so there
 * the token cannot tell.
 */
static char *
renewed_hold(const Renewal *renewal)
{
	if (redis_conn_decides_by_quorum(renewal->conn) ||
		renewal->entry->state.fence == 0)
		return NULL;
	return psprintf(INT64_FORMAT, renewal->entry->state.fence);
}

/*
 * Make the call that renews a lease, as redis_lock_extend() would: the
 * holder's key and fencing token key, its owner token and its ttl, and
 * the fencing token of the hold renewed; or the holder's reader of a lock
 * held in shared mode, or a semaphore's permits that it holds
 */
static void
prepare_renewal(RedisCall *call, Renewal *renewal)
{
	const RedisLockEntry *entry = renewal->entry;
	int			slot = redis_key_slot(entry->key, entry->keylen);

	if (entry->state.mode == LOCK_MODE_SEMAPHORE)
	{
		semaphore_extend_call(call, renewal->conn, entry->key, entry->keylen,
							  slot, entry->token,
							  entry->state.session_permits +
							  entry->state.xact_permits,
							  entry->state.ttl_ms);
		call->origin = renewal;
		return;
	}
	if (entry->state.mode == LOCK_MODE_SHARED)
	{
		shared_extend_call(call, renewal->conn, entry->key, entry->keylen,
						   slot, entry->token, entry->state.ttl_ms);
		call->origin = renewal;
		return;
	}
	renewal->fence_key = redis_sibling_key(entry->key, entry->keylen,
										   entry->prefixlen, slot,
										   REDIS_SIBLING_FENCE,
										   &renewal->fence_keylen);
	renewal->hold_fence = renewed_hold(renewal);
	lock_extend_call(call, renewal->conn, entry->key, entry->keylen, slot,
					 renewal->fence_key, renewal->fence_keylen, entry->token,
					 entry->state.ttl_ms, renewal->hold_fence);
	call->origin = renewal;
}

/*
 * The deadline of a run of renewals: command_timeout, connecting included,
 * and no later than a third of the shortest ttl, so that the next
 * renewals are not held up past their own due
 */
static RedisDeadline
renewal_deadline(RedisCall *calls, int ncalls, TimestampTz start)
{
	RedisDeadline deadline;
	int			i;

	deadline.ms = redislock_command_timeout;
	for (i = 0; i < ncalls; i++)
	{
		const Renewal *renewal = (const Renewal *) calls[i].origin;

		deadline.ms = Min(deadline.ms,
						  Max(renewal->entry->state.ttl_ms / 3, 1));
	}
	deadline.at = TimestampTzPlusMilliseconds(start, deadline.ms);
	deadline.lock_timeout = false;
	deadline.from_first_byte = false;
	deadline.end_id = 0;
	return deadline;
}

/*
 * Run the calls, all in one run; a failure on a node is logged and leaves
 * its calls without a reply, and so does any other error, for they are
 * tried again
 */
static void
run_renewals(RedisCall *calls, int ncalls, TimestampTz start)
{
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		(void) redis_run_until(calls, ncalls,
							   renewal_deadline(calls, ncalls, start), LOG);
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		int			i;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		ereport(LOG,
				(errcode(edata->sqlerrcode),
				 errmsg("could not renew Redis lock leases in database %u",
						MyDatabaseId),
				 errdetail_internal("%s", edata->message),
				 errhint("The redislock worker tries again shortly.")));
		FreeErrorData(edata);
		for (i = 0; i < ncalls; i++)
			calls[i].reply_type = 0;
	}
	PG_END_TRY();
}

/*
 * The lease is lost: mark the entry, and if the watchdog is the first to
 * find it, count and log the loss.  why says how it was found.
 */
static void
lease_lost(const Renewal *renewal, const char *why)
{
	const RedisLockEntry *entry = renewal->entry;

	if (!locktable_mark_lost(renewal->ref))
		return;
	if (renewal->conn != NULL)
		redis_count(renewal->conn, REDIS_STAT_LEASES_LOST, 1);
	ereport(LOG,
			(errmsg("lease of Redis lock \"%s\" on server \"%s\" held by PID %d was lost",
					text_to_cstring(locktable_user_key(entry)),
					NameStr(entry->servername), entry->pid),
			 errdetail_internal("%s", why)));
}

/* Did the last run's renewal of entry id find the key not ours? */
static bool
suspected(uint64 id)
{
	int			i;

	for (i = 0; i < nsuspects; i++)
		if (suspects[i] == id)
			return true;
	return false;
}

/* Note that this run's renewal of entry id found the key not ours */
static void
suspect(uint64 id)
{
	next_suspects[next_nsuspects++] = id;
}

/*
 * Begin a run of ndue renewals: this run's suspects start empty, with room
 * for all of them
 */
static void
begin_suspects(int ndue)
{
	if (next_suspects != NULL)
		pfree(next_suspects);
	next_suspects = MemoryContextAlloc(TopMemoryContext,
									   sizeof(uint64) * ndue);
	next_nsuspects = 0;
}

/* End a run: its suspects are those the next run confirms */
static void
end_suspects(void)
{
	uint64	   *old = suspects;

	suspects = next_suspects;
	nsuspects = next_nsuspects;
	next_suspects = old;
	next_nsuspects = 0;
}

/*
 * Take the outcome of one renewal, sent at start.  Returns when the lease
 * is next due: as renewed now, or soon again when the renewal got no
 * answer and the lease still runs; DT_NOEND when it is no longer renewed.
 */
static TimestampTz
take_outcome(RedisCall *call, Renewal *renewal, TimestampTz start)
{
	const RedisLockEntry *entry = renewal->entry;
	int			ttl_ms = entry->state.ttl_ms;
	TimestampTz now = GetCurrentTimestamp();

	if (call != NULL && call->reply_type == REDIS_REPLY_INTEGER)
	{
		TimestampTz lease_end = lock_lease_end(renewal->conn, ttl_ms, start);

		if (call->integer != 1 && !suspected(renewal->ref.id))
		{
			suspect(renewal->ref.id);
			return TimestampTzPlusMilliseconds(now, RENEW_RETRY_MS);
		}
		if (call->integer != 1)
			lease_lost(renewal, "The key expired or was taken by another client.");
		else if (now >= lease_end)
			lease_lost(renewal, "Redis confirmed the lease only when it may have run out already.");
		else if (locktable_note_renewal(renewal->ref, lease_end))
		{
			redis_count(renewal->conn, REDIS_STAT_RENEWALS, 1);
			return renewal_due(lease_end, ttl_ms);
		}
		return DT_NOEND;
	}
	if (call != NULL && call->reply_type != 0)
		redis_unexpected_reply(call,
							   text_to_cstring(locktable_user_key(entry)),
							   LOG);
	if (now >= renewal->lease_end)
	{
		lease_lost(renewal, "The lease ran out before a renewal got an answer.");
		return DT_NOEND;
	}
	return TimestampTzPlusMilliseconds(now, RENEW_RETRY_MS);
}

/*
 * Renew the leases due, each with its holder's connection, all in one
 * run.  Returns when the next of them is due.
 */
static TimestampTz
renew(Renewal *due, int ndue)
{
	RedisCall  *calls = palloc0(sizeof(RedisCall) * ndue);
	RedisCall **call_of = palloc0(sizeof(RedisCall *) * ndue);
	int			ncalls = 0;
	TimestampTz start;
	TimestampTz next = DT_NOEND;
	int			i;

	begin_suspects(ndue);
	find_connections(due, ndue);
	for (i = 0; i < ndue; i++)
		if (due[i].conn != NULL)
		{
			call_of[i] = &calls[ncalls++];
			prepare_renewal(call_of[i], &due[i]);
		}
	start = GetCurrentTimestamp();
	run_renewals(calls, ncalls, start);
	for (i = 0; i < ndue; i++)
	{
		TimestampTz due_at = take_outcome(call_of[i], &due[i], start);

		next = Min(next, due_at);
	}
	end_suspects();
	return next;
}

/*
 * Renew the leases of this database's locks that are due.  Returns when
 * the next lease is due, DT_NOEND when no lock here wants its lease
 * renewed.
 */
TimestampTz
watchdog_renew_due_leases(void)
{
	int			n;
	RedisLockEntry *entries = locktable_copy_database(false, &n);
	Renewal    *due = palloc(sizeof(Renewal) * Max(n, 1));
	int			ndue = 0;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz next = DT_NOEND;
	int			i;

	for (i = 0; i < n; i++)
	{
		RedisLockEntry *entry = &entries[i];
		int			ttl_ms = entry->state.ttl_ms;
		TimestampTz lease_end;
		TimestampTz due_at;

		if (!renewable(entry, now))
			continue;
		lease_end = lease_end_of(entry);
		due_at = renewal_due(lease_end, ttl_ms);
		if (due_at > TimestampTzPlusMilliseconds(now,
												 ttl_ms / RENEW_AHEAD_DIVISOR))
		{
			next = Min(next, due_at);
			continue;
		}
		due[ndue].entry = entry;
		due[ndue].ref.index = entry->index;
		due[ndue].ref.id = entry->id;
		due[ndue].lease_end = lease_end;
		due[ndue].conn = NULL;
		due[ndue].hold_fence = NULL;
		ndue++;
	}
	if (ndue > 0)
	{
		TimestampTz renewed_due_at = renew(due, ndue);

		next = Min(next, renewed_due_at);
	}
	return next;
}
