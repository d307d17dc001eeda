/*-------------------------------------------------------------------------
 *
 * args.c
 *		SQL arguments checked before anything is done with them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"

#include "redislock.h"

/*
 * Key argument argno of a SQL function, checked (neither NULL nor empty)
 * before the server is looked up or Redis asked: redis_key() makes the
 * Redis key from it.
 */
text *
redis_key_arg(FunctionCallInfo fcinfo, int argno)
{
	text	   *key;

	require_argument(fcinfo, argno, "Redis key");
	key = PG_GETARG_TEXT_PP(argno);
	if (VARSIZE_ANY_EXHDR(key) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("Redis key must not be empty")));
	return key;
}
