/*-------------------------------------------------------------------------
 *
 * xact.c
 *		Ties Redis locks and stock decrements to PostgreSQL transactions.
 *
 * Before commit, transaction-scoped locks are verified (an ERROR is still
 * allowed there and turns the commit into an abort).  After commit or
 * abort they are released, and after abort decrements are given back: the
 * work of all keys and servers goes out at once, in one round trip.  Those
 * callbacks run with interrupts held and must not fail, so their Redis work
 * runs under one deadline for the whole end (command_timeout, capped by
 * end_timeout_limit) and failures are warnings; lock leases are the safety
 * net.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/memutils.h"

#include "guc.h"
#include "lock/lock.h"
#include "stock/stock.h"
#include "xact.h"

/* Scratch memory of transaction-end work, reset after each batch */
static MemoryContext batch_cxt = NULL;

/*
 * The deadline of the transaction end under way, which names it too, and
 * whether that end has one yet: it gets one at its first Redis work
 */
static RedisDeadline end_deadline;
static bool end_has_deadline = false;

/* Which holds and decrements end */
typedef enum RedisScopeEnd
{
	END_SUBTRANSACTION,
	END_TRANSACTION,
	END_SESSION
} RedisScopeEnd;

/*
 * Does this end continue the one before it, and share its bound?  Only the
 * ends of one ROLLBACK or ROLLBACK TO SAVEPOINT that unwinds savepoint
 * levels do: PostgreSQL runs them back to back with the block marked as
 * aborting.  Any other end has a bound of its own, since time may have
 * passed since the one before: a savepoint rolled back by an exception
 * block and the commit that ends its statement, or a transaction end and
 * the backend's exit.
 */
static bool
end_continues_previous(RedisScopeEnd scope)
{
	static TimestampTz unwinding_statement = 0;
	TimestampTz statement = GetCurrentStatementStartTimestamp();
	bool		unwinding = scope != END_SESSION &&
		TransactionBlockStatusCode() == 'E';
	bool		continues = unwinding && unwinding_statement == statement;

	unwinding_statement = unwinding ? statement : 0;
	return continues;
}

/*
 * The deadline of the end under way: the one it has, else a new one from
 * now, command_timeout capped by the administrator's end_timeout_limit,
 * under a new end number.  An end during which the backend was asked to
 * terminate gives up at once.
 */
static RedisDeadline
deadline_of_end(void)
{
	if (end_has_deadline)
	{
		if (ProcDiePending)
			end_deadline.at = GetCurrentTimestamp();
		return end_deadline;
	}
	end_has_deadline = true;
	end_deadline.ms = Min(redislock_command_timeout,
						  redislock_end_timeout_limit);
	end_deadline.at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												  end_deadline.ms);
	end_deadline.lock_timeout = false;
	end_deadline.from_first_byte = false;
	end_deadline.end_id++;
	return end_deadline;
}

/*
 * End a subtransaction, a transaction or the session: queue the Redis work
 * of the holds and decrements that end (lock releases, give-backs of
 * decrements not committed), run it, then let each call's owner report
 * failures and forget what is done.
 */
static void
end_scope(RedisScopeEnd scope, bool commit)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(batch_cxt);
	RedisBatch	batch = {0};
	int			level = GetCurrentTransactionNestLevel();
	int			i;

	if (!end_continues_previous(scope))
		end_has_deadline = false;
	switch (scope)
	{
		case END_SUBTRANSACTION:
			locks_end_subxact(&batch, level, commit);
			stock_end_subxact(&batch, level, commit);
			break;
		case END_TRANSACTION:
			locks_end_xact(&batch, false);
			stock_end_xact(&batch, commit);
			break;
		case END_SESSION:
			locks_end_xact(&batch, true);
			stock_end_xact(&batch, false);
			break;
	}

	if (batch.ncalls > 0)
		(void) redis_run_until(batch.calls, batch.ncalls,
							   deadline_of_end(), WARNING);
	for (i = 0; i < batch.ncalls; i++)
		batch.calls[i].on_reply(&batch.calls[i]);
	if (scope != END_SUBTRANSACTION)
		redis_conns_end_xact();

	MemoryContextSwitchTo(oldcxt);
	MemoryContextReset(batch_cxt);
}

/*
 * Two-phase commit would need Redis state to outlive the backend, which
 * leases cannot promise; refuse it, as postgres_fdw does.
 */
static void
refuse_prepare(void)
{
	if (locks_have_xact_holds() || stock_has_pending())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that holds Redis locks or has decremented Redis stock"),
				 errhint("Use session locks (redis_lock_acquire_session), or commit without two-phase commit.")));
}

static void shmem_exit_callback(int code, Datum arg);

/*
 * Register the backend-exit callbacks, once per backend: the release of
 * what the backend holds, then (on_shmem_exit runs after every
 * before_shmem_exit callback) the freeing of the lock table entries that
 * are left.  A postmaster that preloads the library cannot do it for its
 * children (they start with empty exit lists), so each backend does it at
 * its first transaction end, which comes before any user command.
 */
static void
ensure_exit_callback(void)
{
	static bool registered = false;

	if (!registered)
	{
		before_shmem_exit(shmem_exit_callback, (Datum) 0);
		if (redislock_preloaded)
			on_shmem_exit(locktable_exit, (Datum) 0);
		registered = true;
	}
}

static void
xact_callback(XactEvent event, void *arg)
{
	ensure_exit_callback();
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (redislock_verify_before_commit)
				locks_verify_before_commit();
			break;
		case XACT_EVENT_PRE_PREPARE:
			refuse_prepare();
			break;
		case XACT_EVENT_COMMIT:
			end_scope(END_TRANSACTION, true);
			break;
		case XACT_EVENT_ABORT:
			end_scope(END_TRANSACTION, false);
			break;
		default:
			/* functions are parallel unsafe: nothing runs in workers */
			break;
	}
}

static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_COMMIT_SUB)
		end_scope(END_SUBTRANSACTION, true);
	else if (event == SUBXACT_EVENT_ABORT_SUB)
		end_scope(END_SUBTRANSACTION, false);
}

/*
 * Backend exit: end every hold and give back the decrements of a
 * transaction that will not commit.  This runs before the exit aborts that
 * transaction, which then finds nothing left to do.  Then the clean-up
 * that waited for a next command goes out: there is none.
 */
static void
shmem_exit_callback(int code, Datum arg)
{
	end_scope(END_SESSION, false);
	node_flush_held();
}

void
redislock_init_xact(void)
{
	batch_cxt = AllocSetContextCreate(TopMemoryContext,
									  "redislock transaction end",
									  ALLOCSET_DEFAULT_SIZES);
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
	if (!process_shared_preload_libraries_in_progress)
		ensure_exit_callback();
}
