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
 * A key that keeps data beside a Redis key (a lock's fencing counter, an
 * item's buyers) and must hash to its Redis Cluster slot: it reuses the
 * key's hash tag, or makes the whole key its tag.  A key containing '}' but
 * no hash tag cannot be made a tag; its sibling then sits in another slot,
 * which only matters on a Cluster.
 */
char *
redis_sibling_key(const char *rkey, int rkeylen, const char *suffix, int *len)
{
	const char *open = memchr(rkey, '{', rkeylen);
	const char *close = NULL;
	bool		own_tag;
	int			suffixlen = strlen(suffix);
	char	   *sibling = palloc(rkeylen + suffixlen + 4);
	char	   *p = sibling;

	if (open != NULL)
		close = memchr(open + 1, '}', rkeylen - (open + 1 - rkey));
	own_tag = !((close != NULL && close > open + 1) ||
				memchr(rkey, '}', rkeylen) != NULL);

	if (own_tag)
		*p++ = '{';
	memcpy(p, rkey, rkeylen);
	p += rkeylen;
	if (own_tag)
		*p++ = '}';
	*p++ = ':';
	memcpy(p, suffix, suffixlen + 1);
	*len = (p - sibling) + suffixlen;
	return sibling;
}

/*
 * The Redis key named by key argument argno of a SQL function, on the
 * server of redislock.server: that server's key prefix, then the key.  The
 * key is checked (neither NULL nor empty) before anything else is done.
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
