/*-------------------------------------------------------------------------
 *
 * redislock_bench.c
 *		The floor of redislock's benchmark: the Redis commands of a lock
 *		round trip and of a stock decrement, issued from SQL with nothing
 *		around them.
 *
 * bench_floor_acquire and bench_floor_release run redislock's own scripts
 * (scripts.c is compiled into this module, so the Lua text and SHA-1s are
 * the extension's) by EVALSHA, with the same KEYS and ARGV as the extension
 * sends: lock key, fencing key, owner token, ttl to acquire; lock key,
 * owner token to release.  bench_floor_stock_decr runs the least a correct
 * decrement must do, check and take in one script, and keeps no record of
 * the operation.  bench_floor_durable_stock_decr first makes the
 * transaction's ID durable as redislock 1.1 did before a decrement, so that
 * the cost of that step can be told from the cost of the records.  There is one
 * plain hiredis connection per backend, opened on first use to
 * redislock_bench.host and redislock_bench.port, and no catalog access,
 * privilege check, hold counting, give-back record or transaction hook: what
 * redislock costs above this is its bookkeeping.
 *
 * This module is built and loaded by bench/run only; the extension's
 * Makefile neither builds nor installs it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include <hiredis/hiredis.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "replication/message.h"
#include "utils/builtins.h"
#include "utils/guc.h"

#include "scripts.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

PG_FUNCTION_INFO_V1(bench_floor_acquire);
PG_FUNCTION_INFO_V1(bench_floor_release);
PG_FUNCTION_INFO_V1(bench_floor_stock_decr);
PG_FUNCTION_INFO_V1(bench_floor_durable_stock_decr);

/* Where Redis is (settings redislock_bench.host and redislock_bench.port) */
static char *bench_host = NULL;
static int	bench_port = 6379;

/* This backend's connection and owner token, made on first use */
static redisContext *ctx = NULL;
static char owner_token[320];

static void fail(const char *what) pg_attribute_noreturn();

/* Drop the connection and raise an ERROR naming what failed */
static void
fail(const char *what)
{
	char		reason[128];

	strlcpy(reason, ctx != NULL ? ctx->errstr : "out of memory",
			sizeof(reason));
	if (ctx != NULL)
	{
		redisFree(ctx);
		ctx = NULL;
	}
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("%s at Redis server %s:%d failed: %s",
					what, bench_host, bench_port, reason)));
}

/* One command, one round trip; the caller frees the reply */
static redisReply *
command(int argc, const char **argv, const size_t *argvlen)
{
	redisReply *reply = redisCommandArgv(ctx, argc, argv, argvlen);

	if (reply == NULL)
		fail(argv[0]);
	if (reply->type == REDIS_REPLY_ERROR)
	{
		char	   *message = pstrdup(reply->str);

		freeReplyObject(reply);
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("Redis answered %s: %s", argv[0], message)));
	}
	return reply;
}

/*
 * The floor's decrement: take qty units if that many remain and return
 * what is left, or -1.  KEYS: stock.  ARGV: quantity.
 */
static RedisScript floor_decr_script = {
	"floor_decr",
	"local left = redis.call('DECRBY', KEYS[1], ARGV[1])\n"
	"if left < 0 then\n"
	"  redis.call('INCRBY', KEYS[1], ARGV[1])\n"
	"  return -1\n"
	"end\n"
	"return left\n"
};

/* SCRIPT LOAD a script, keeping the SHA-1 that Redis computed */
static void
load_script(RedisScript *script)
{
	const char *argv[3] = {"SCRIPT", "LOAD", script->body};
	size_t		argvlen[3] = {6, 4, strlen(script->body)};
	redisReply *reply = command(3, argv, argvlen);

	if (reply->type == REDIS_REPLY_STRING && reply->len == 40)
		memcpy(script->sha1, reply->str, 41);
	freeReplyObject(reply);
}

/*
 * Connect on first use and load the scripts.  The owner token has the
 * shape and length of the extension's: host, port, pid, 32 random hex
 * digits.
 */
static void
ensure_connected(void)
{
	struct timeval timeout = {1, 0};
	uint8		random_bytes[16];
	char		hex[sizeof(random_bytes) * 2 + 1];
	char		hostname[256];
	int			i;

	if (ctx != NULL)
		return;

	ctx = redisConnectWithTimeout(bench_host, bench_port, timeout);
	if (ctx == NULL || ctx->err)
		fail("connect");
	redisSetTimeout(ctx, timeout);
	load_script(&acquire_script);
	load_script(&release_script);
	load_script(&floor_decr_script);

	if (!pg_strong_random(random_bytes, sizeof(random_bytes)))
		elog(ERROR, "could not generate random bytes");
	for (i = 0; i < (int) sizeof(random_bytes); i++)
		snprintf(hex + i * 2, 3, "%02x", random_bytes[i]);
	if (gethostname(hostname, sizeof(hostname)) != 0)
		strlcpy(hostname, "unknown", sizeof(hostname));
	hostname[sizeof(hostname) - 1] = '\0';
	snprintf(owner_token, sizeof(owner_token), "pg:%s:%d:%d:%s",
			 hostname, PostPortNumber, MyProcPid, hex);
}

/* EVALSHA script with its keys and args; returns its integer answer,
 * which the acquire script gives as a string */
static long long
evalsha(const RedisScript *script, int nkeys, int nargs,
		const char **args, const size_t *arglens)
{
	const char *argv[8];
	size_t		argvlen[8];
	char		nkeys_text[12];
	redisReply *reply;
	long long	result;
	int			i;

	Assert(nargs <= 5);
	snprintf(nkeys_text, sizeof(nkeys_text), "%d", nkeys);
	argv[0] = "EVALSHA";
	argvlen[0] = 7;
	argv[1] = script->sha1;
	argvlen[1] = 40;
	argv[2] = nkeys_text;
	argvlen[2] = strlen(nkeys_text);
	for (i = 0; i < nargs; i++)
	{
		argv[3 + i] = args[i];
		argvlen[3 + i] = arglens[i];
	}

	reply = command(3 + nargs, argv, argvlen);
	if (reply->type == REDIS_REPLY_STRING)
		result = strtoll(reply->str, NULL, 10);
	else if (reply->type == REDIS_REPLY_INTEGER)
		result = reply->integer;
	else
	{
		int			type = reply->type;

		freeReplyObject(reply);
		elog(ERROR, "unexpected reply of type %d to script \"%s\"",
			 type, script->name);
	}
	freeReplyObject(reply);
	return result;
}

/*
 * bench_floor_acquire(key, ttl_ms): the extension's acquire script, SET NX
 * PX plus the fencing counter; true when taken
 */
Datum
bench_floor_acquire(PG_FUNCTION_ARGS)
{
	char	   *key = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *fence_key = psprintf("{%s}:fence", key);
	char		ttl[12];
	const char *args[4];
	size_t		arglens[4];

	ensure_connected();
	snprintf(ttl, sizeof(ttl), "%d", PG_GETARG_INT32(1));
	args[0] = key;
	arglens[0] = strlen(key);
	args[1] = fence_key;
	arglens[1] = strlen(fence_key);
	args[2] = owner_token;
	arglens[2] = strlen(owner_token);
	args[3] = ttl;
	arglens[3] = strlen(ttl);
	PG_RETURN_BOOL(evalsha(&acquire_script, 2, 4, args, arglens) > 0);
}

/*
 * bench_floor_release(key): the extension's compare-and-delete script;
 * true when the key carried our token and was deleted
 */
Datum
bench_floor_release(PG_FUNCTION_ARGS)
{
	char	   *key = text_to_cstring(PG_GETARG_TEXT_PP(0));
	const char *args[2];
	size_t		arglens[2];

	ensure_connected();
	args[0] = key;
	arglens[0] = strlen(key);
	args[1] = owner_token;
	arglens[1] = strlen(owner_token);
	PG_RETURN_BOOL(evalsha(&release_script, 1, 2, args, arglens) == 1);
}

/* The floor's decrement script: what remains, or -1 */
static int64
floor_decrement(text *key_text, int64 quantity)
{
	char	   *key = text_to_cstring(key_text);
	char		qty[24];
	const char *args[2];
	size_t		arglens[2];

	ensure_connected();
	snprintf(qty, sizeof(qty), INT64_FORMAT, quantity);
	args[0] = key;
	arglens[0] = strlen(key);
	args[1] = qty;
	arglens[1] = strlen(qty);
	return evalsha(&floor_decr_script, 1, 2, args, arglens);
}

/*
 * bench_floor_stock_decr(key, qty): the floor's decrement script; what
 * remains, or -1 (taking nothing) when fewer than qty units are left
 */
Datum
bench_floor_stock_decr(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(floor_decrement(PG_GETARG_TEXT_PP(0), PG_GETARG_INT64(1)));
}

/*
 * bench_floor_durable_stock_decr(key, qty): the same, after the step that
 * redislock 1.1 took before a decrement reached Redis: the transaction ID is
 * assigned, carried by a small WAL record that is flushed, and the commit is
 * made synchronous.
 */
Datum
bench_floor_durable_stock_decr(PG_FUNCTION_ARGS)
{
	(void) GetCurrentFullTransactionId();
	XLogFlush(LogLogicalMessage("redislock_bench", "", 0, false));
	ForceSyncCommit();
	PG_RETURN_INT64(floor_decrement(PG_GETARG_TEXT_PP(0), PG_GETARG_INT64(1)));
}

void
_PG_init(void)
{
	DefineCustomStringVariable("redislock_bench.host",
							   "Redis host of the benchmark floor.",
							   NULL,
							   &bench_host,
							   "127.0.0.1",
							   PGC_USERSET, 0,
							   NULL, NULL, NULL);
	DefineCustomIntVariable("redislock_bench.port",
							"Redis port of the benchmark floor.",
							NULL,
							&bench_port,
							6379, 1, 65535,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	MarkGUCPrefixReserved("redislock_bench");
	redislock_init_scripts();
}
