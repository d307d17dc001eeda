/*-------------------------------------------------------------------------
 *
 * resp.c
 *		RESP encoding of the commands redislock sends.
 *
 * Commands are encoded here rather than by hiredis' printf-like formatter,
 * which costs more than the rest of a call.  Every argument is a bulk
 * string with its length, so keys and values are binary safe.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"

#include "io/io.h"

/* Append a RESP header: the marker, then the number, then CRLF */
static void
append_resp_header(StringInfo buf, char marker, uint64 number)
{
	char	   *p;

	enlargeStringInfo(buf, MAXINT8LEN + 3);
	p = buf->data + buf->len;
	*p++ = marker;
	p += pg_ulltoa_n(number, p);
	*p++ = '\r';
	*p++ = '\n';
	*p = '\0';
	buf->len = p - buf->data;
}

/* Append a RESP bulk string: binary safe, whatever the bytes */
static void
append_resp_bulk(StringInfo buf, const char *arg, size_t len)
{
	append_resp_header(buf, '$', len);
	enlargeStringInfo(buf, len + 2);
	memcpy(buf->data + buf->len, arg, len);
	buf->data[buf->len + len] = '\r';
	buf->data[buf->len + len + 1] = '\n';
	buf->len += len + 2;
	buf->data[buf->len] = '\0';
}

/* Append a call: EVALSHA (or EVAL) of its script, or its plain command */
void
resp_append_call(StringInfo buf, const RedisCall *call)
{
	int			i;

	append_resp_header(buf, '*', call->argc + (call->script != NULL ? 3 : 0));
	if (call->script != NULL)
	{
		char		nkeys[12];

		if (call->send_body)
		{
			append_resp_bulk(buf, "EVAL", 4);
			append_resp_bulk(buf, call->script->body,
							 strlen(call->script->body));
		}
		else
		{
			append_resp_bulk(buf, "EVALSHA", 7);
			append_resp_bulk(buf, call->script->sha1, 40);
		}
		append_resp_bulk(buf, nkeys, compat_ltoa(call->nkeys, nkeys));
	}
	for (i = 0; i < call->argc; i++)
	{
		size_t		len;
		const char *arg = redis_call_argv(call, i, &len);

		if (arg == NULL)
		{
			char		intarg[MAXINT8LEN + 1];

			append_resp_bulk(buf, intarg,
							 compat_lltoa(call->intargs[i], intarg));
		}
		else
			append_resp_bulk(buf, arg, len);
	}
}

/* Append SCRIPT LOAD of a script, for calls that Redis answered NOSCRIPT */
void
resp_append_script_load(StringInfo buf, const RedisScript *script)
{
	append_resp_header(buf, '*', 3);
	append_resp_bulk(buf, "SCRIPT", 6);
	append_resp_bulk(buf, "LOAD", 4);
	append_resp_bulk(buf, script->body, strlen(script->body));
}
