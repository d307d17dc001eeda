/*-------------------------------------------------------------------------
 *
 * redlock.c
 *		Redlock: one lock over N independent Redis masters, granted by a
 *		quorum of them.
 *
 * A call on a Redlock server stands for the same call on every master.
 * batch.c sends those copies in one wait; their answers are counted here
 * as they arrive, and the call is decided as soon as a quorum (N/2 + 1)
 * said yes, or so many said no or failed that a quorum cannot be reached:
 * a stalled minority holds nothing back.  What the masters that did not
 * answer in time do later is settled by the connection's order: anything
 * sent to them afterwards (a release) runs after it.
 *
 * The scripts answer yes with a string (the acquire script's fencing
 * token) or 1, and no with 0.  The decided call gets the answer of the
 * quorum: the largest token, or 1, or 0.  Whether it came in time for the
 * lease it asked for is for the caller to judge (lock/lease.c), allowing
 * for the masters' clock drift: 1% of the lease + 2 ms, the figure of the
 * Redis documentation.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "lib/stringinfo.h"

#include "server/server.h"

/* What the copies of one call on a Redlock server have answered so far */
typedef struct Quorum
{
	RedisCall  *call;			/* the caller's call */
	int			nmasters;
	int			yes;
	int			no;
	int			failed;
	int			not_run;		/* answered NOSCRIPT: sent again next round */
	bool		decided;
	const RedisCall *best;		/* the yes with the largest answer */
	const RedisCall *error;		/* the first error reply */
	StringInfoData failures;	/* "endpoint: reason" of masters that failed */
	int			sqlstate;		/* of those failures when all agree, else 0 */
} Quorum;

/* Make conn a Redlock server over the given masters */
static void
redlock_init(RedisConn *conn, const RedisServerOptions *opts)
{
	redis_conn_add_endpoints(conn, opts->endpoints, "master");
}

/* The clock drift allowed for a lease of ttl_ms on a Redlock server */
static int
redlock_drift_ms(int ttl_ms)
{
	return ttl_ms / 100 + 2;
}

static int
quorum_size(const Quorum *quorum)
{
	return quorum->nmasters / 2 + 1;
}

/*
 * A copy of the call for each master, in copies, counted by a new quorum.
 * Returns their number.
 */
static int
redlock_expand(RedisCall *call, RedisCall **copies)
{
	RedisConn  *conn = call->conn;
	Quorum	   *quorum = palloc0(sizeof(Quorum));
	int			m;

	quorum->call = call;
	quorum->nmasters = conn->nnodes;
	initStringInfo(&quorum->failures);
	call->quorum = quorum;
	for (m = 0; m < conn->nnodes; m++)
	{
		RedisCall  *copy = palloc(sizeof(RedisCall));

		memcpy(copy, call, sizeof(RedisCall));
		redis_call_on_node(copy, conn->nodes[m]);

		/*
		 * A master that answered NOSCRIPT after the quorum was known would
		 * not be waited for, and would never run the call: the text goes
		 * with it, and Redis caches the compiled script.
		 */
		copy->send_body = true;
		copies[m] = copy;
	}
	return conn->nnodes;
}

/* Is a reply larger than another: longer digit strings are larger */
static bool
larger_answer(const RedisCall *a, const RedisCall *b)
{
	if (a->reply_type != REDIS_REPLY_STRING)
		return false;
	if (b->reply_type != REDIS_REPLY_STRING)
		return true;
	if (a->len != b->len)
		return a->len > b->len;
	return strcmp(a->str, b->str) > 0;
}

static void
check_decided(Quorum *quorum)
{
	int			outstanding = quorum->nmasters - quorum->yes - quorum->no -
		quorum->failed;

	if (quorum->yes >= quorum_size(quorum) ||
		quorum->yes + outstanding < quorum_size(quorum))
		quorum->decided = true;
}

/* Count the reply of a master's copy of a call */
static void
redlock_note_reply(const RedisCall *copy)
{
	Quorum	   *quorum = copy->quorum;

	if (quorum == NULL || copy->reply_type == 0)
		return;
	/* a script that was not loaded runs again: its answer is still to come */
	if (redis_reply_is_error(copy, "NOSCRIPT"))
	{
		quorum->not_run++;
		return;
	}
	if (copy->reply_type == REDIS_REPLY_STRING ||
		(copy->reply_type == REDIS_REPLY_INTEGER && copy->integer == 1))
	{
		quorum->yes++;
		if (quorum->best == NULL || larger_answer(copy, quorum->best))
			quorum->best = copy;
	}
	else if (copy->reply_type == REDIS_REPLY_INTEGER)
		quorum->no++;
	else
	{
		quorum->failed++;
		if (quorum->error == NULL && copy->reply_type == REDIS_REPLY_ERROR)
			quorum->error = copy;
	}
	check_decided(quorum);
}

/*
 * Count a master that could not answer a copy of a call, why, and the
 * SQLSTATE that would report it
 */
static void
redlock_note_failure(const RedisCall *copy, const char *reason, int sqlstate)
{
	Quorum	   *quorum = copy->quorum;

	if (quorum == NULL)
		return;
	if (quorum->failures.len == 0)
		quorum->sqlstate = sqlstate;
	else if (quorum->sqlstate != sqlstate)
		quorum->sqlstate = 0;
	quorum->failed++;
	if (quorum->failures.len > 0)
		appendStringInfoString(&quorum->failures, "; ");
	appendStringInfo(&quorum->failures, "%s: %s", copy->node->endpoint,
					 reason);
	check_decided(quorum);
}

/*
 * Is a copy's reply moot: is the call it stands for decided, or can the
 * copies sent again next round make a quorum without it?  A stalled master
 * then holds back neither the decision nor the next round.
 */
static bool
redlock_copy_is_moot(const RedisCall *copy)
{
	const Quorum *quorum = copy->quorum;

	return quorum != NULL &&
		(quorum->decided ||
		 quorum->yes + quorum->not_run >= quorum_size(quorum));
}

/* A new round starts: the copies sent again are outstanding once more */
static void
redlock_start_round(RedisCall *copy)
{
	copy->quorum->not_run = 0;
}

/* Give the call the quorum's answer: the best yes, or 0 */
static void
take_quorum_answer(RedisCall *call, const Quorum *quorum, bool granted)
{
	if (granted)
	{
		call->reply_type = quorum->best->reply_type;
		call->integer = quorum->best->integer;
		call->str = quorum->best->str;
		call->len = quorum->best->len;
	}
	else
	{
		call->reply_type = REDIS_REPLY_INTEGER;
		call->integer = 0;
	}
	call->node = quorum->best ? quorum->best->node : call->conn->nodes[0];
}

/*
 * Decide a call from what the masters' copies answered.  When a quorum
 * could not answer at all the call has no reply and the failure is
 * reported at elevel, naming the masters and why; when a quorum answered
 * with an error, the call gets that error reply for the caller to report.
 * Returns false when the call failed.
 */
static bool
redlock_decide(RedisCall *call, int elevel)
{
	Quorum	   *quorum = call->quorum;
	bool		granted = quorum->yes >= quorum_size(quorum);
	bool		ok = true;

	if (granted || quorum->yes + quorum->no >= quorum_size(quorum))
		take_quorum_answer(call, quorum, granted);
	else if (quorum->error != NULL)
	{
		call->reply_type = quorum->error->reply_type;
		call->str = quorum->error->str;
		call->len = quorum->error->len;
		call->node = quorum->error->node;
	}
	else
	{
		ok = false;
		call->reply_type = 0;
		ereport(elevel,
				(errcode(quorum->sqlstate ? quorum->sqlstate :
						 ERRCODE_CONNECTION_FAILURE),
				 errmsg("a quorum of the %d Redlock masters of server \"%s\" did not answer",
						quorum->nmasters, call->conn->servername),
				 errdetail("Unreachable: %s.", quorum->failures.data),
				 errhint("A Redlock server needs %d of its masters.",
						 quorum_size(quorum))));
	}
	call->quorum = NULL;
	return ok;
}

/* Its masters are its nodes */
static int
redlock_masters(RedisConn *conn, RedisNode ***masters)
{
	*masters = conn->nodes;
	return conn->nnodes;
}

const RedisTopology redlock_topology = {
	.init = redlock_init,
	.masters = redlock_masters,
	.drift_ms = redlock_drift_ms,

	/* a call is a copy on each master */
	.expand = redlock_expand,
	.start_round = redlock_start_round,

	/* and the copies' answers are counted, to a quorum */
	.note_reply = redlock_note_reply,
	.note_failure = redlock_note_failure,
	.copy_is_moot = redlock_copy_is_moot,
	.decide = redlock_decide,
};
