/*-------------------------------------------------------------------------
 *
 * args.c
 *		SQL arguments turned into what Redis calls need.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"

#include "redislock.h"

/*
 * The Redis key named by key argument argno of a SQL function, on the
 * server of redislock.server: that server's key prefix, then the key.  The
 * key is checked (neither NULL nor empty, nor a key the extension keeps
 * beside another) before anything is asked of Redis.
 */
char *
redis_key_arg(FunctionCallInfo fcinfo, int argno, RedisConn **conn_out,
			  int *rkeylen)
{
	text	   *key;
	int			keylen;
	int			prefixlen;
	RedisConn  *conn;
	char	   *rkey;

	require_argument(fcinfo, argno, "Redis key");
	key = PG_GETARG_TEXT_PP(argno);
	keylen = VARSIZE_ANY_EXHDR(key);
	if (keylen == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("Redis key must not be empty")));

	conn = redis_conn_current();
	prefixlen = strlen(conn->key_prefix);
	rkey = palloc(prefixlen + keylen + 1);
	memcpy(rkey, conn->key_prefix, prefixlen);
	memcpy(rkey + prefixlen, VARDATA_ANY(key), keylen);
	rkey[prefixlen + keylen] = '\0';
	redis_check_key_not_reserved(rkey, prefixlen + keylen, prefixlen);

	*conn_out = conn;
	*rkeylen = prefixlen + keylen;
	return rkey;
}

/* The functions are not STRICT, so that a NULL argument is an error */
void
require_argument(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
}
