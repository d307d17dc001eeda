/*-------------------------------------------------------------------------
 *
 * keys.c
 *		Where redislock's keys live: inside the server's key prefix, and
 *		in the Redis Cluster hash slot of the key they belong to; the slot
 *		of a key, and the key arguments of the SQL functions.
 *
 * A lock or stock key is exactly the server's key_prefix followed by the
 * user's key, so that other clients find it.  What the extension keeps
 * beside such a key (a lock's fencing token, an item's buyers and
 * decrement records) is a sibling key,
 *
 *		<key_prefix>{<slot tag>}:<kind>:<key>
 *
 * where the slot tag is a short string that hashes to the Cluster slot of
 * <key_prefix><key>.  Whatever the user's key contains, braces included,
 * the first '{' of a sibling is the one before the slot tag (the prefix
 * may hold a complete hash tag, which then decides the slot of every key
 * alike), so one script's keys always share one slot and stay inside the
 * prefix, where a Redis ACL pattern such as ~shop:* confines them.
 *
 * A user's key that is itself the sibling of another key is refused, so
 * that no lock or stock can take the place of what is kept beside a key.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "compat.h"
#include "keys.h"

/* CRC16 (XMODEM: polynomial 0x1021, no reflection), per table, built once */
static uint16 crc16_table[256];

static void
build_crc16_table(void)
{
	int			i;

	for (i = 0; i < 256; i++)
	{
		uint16		crc = i << 8;
		int			bit;

		for (bit = 0; bit < 8; bit++)
			crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
		crc16_table[i] = crc;
	}
}

static uint16
crc16(const char *buf, int len)
{
	uint16		crc = 0;
	int			i;

	if (crc16_table[1] == 0)
		build_crc16_table();
	for (i = 0; i < len; i++)
		crc = (crc << 8) ^ crc16_table[((crc >> 8) ^ (uint8) buf[i]) & 0xff];
	return crc;
}

/*
 * The part of a key that decides its slot: the content of its first
 * complete, non-empty hash tag, else the whole key.
 */
static const char *
hashed_part(const char *key, int len, int *hashed_len)
{
	const char *open = memchr(key, '{', len);
	const char *close;

	if (open != NULL)
	{
		close = memchr(open + 1, '}', len - (open + 1 - key));
		if (close != NULL && close > open + 1)
		{
			*hashed_len = close - (open + 1);
			return open + 1;
		}
	}
	*hashed_len = len;
	return key;
}

/* The Redis Cluster hash slot of a key */
int
redis_key_slot(const char *key, int len)
{
	int			hashed_len;
	const char *hashed = hashed_part(key, len, &hashed_len);

	return crc16(hashed, hashed_len) & (REDIS_CLUSTER_SLOTS - 1);
}

/*
 * The name of each kind of sibling key (RedisSiblingKind), and what it
 * keeps, for messages.  Every kind has its keys refused to users.
 */
static const struct
{
	const char *kind;
	const char *what;
}			sibling_kinds[] =
{
	[REDIS_SIBLING_FENCE] = {"fence", "fencing token"},
	[REDIS_SIBLING_RECORDS] = {"ops", "decrement records"},
	[REDIS_SIBLING_BUYERS] = {"buyers", "buyers"},
	[REDIS_SIBLING_WAITERS] = {"waiters", "queue of waiters"},
	[REDIS_SIBLING_HANDOFF] = {"handoff", "woken waiter"}
};

/*
 * For each slot, the smallest number whose decimal digits hash to it, or
 * PG_UINT32_MAX while it is not known; and how many numbers, from 0 on,
 * have been tried
 */
static uint32 *slot_tags = NULL;
static uint32 slot_tags_tried = 0;

/*
 * The slot tag of a slot: the smallest number whose decimal digits hash to
 * it.  Numbers are tried in order, each once per backend, only until the
 * slot asked for has its number, and every slot met on the way keeps its
 * own.  A slot takes about 16,000 tries on average, a fraction of a
 * millisecond; all 16,384 of them would take about 170,000, a few
 * milliseconds at a session's first decrement or lock.
 */
static uint32
slot_tag(int slot)
{
	if (slot_tags == NULL)
	{
		slot_tags = MemoryContextAlloc(TopMemoryContext,
									   sizeof(uint32) * REDIS_CLUSTER_SLOTS);
		memset(slot_tags, 0xff, sizeof(uint32) * REDIS_CLUSTER_SLOTS);
	}
	while (slot_tags[slot] == PG_UINT32_MAX)
	{
		char		digits[12];
		uint32		n = slot_tags_tried++;
		int			hit = redis_key_slot(digits, pg_ultoa_n(n, digits));

		if (slot_tags[hit] == PG_UINT32_MAX)
			slot_tags[hit] = n;
	}
	return slot_tags[slot];
}

/*
 * Refuse a user's key that is the sibling of another key: a lock or stock
 * there would collide with what is kept beside that key (a string where a
 * hash of decrement records belongs makes every decrement fail, say).
 * Exactly the siblings are refused, "{<tag>}:<kind>:<key>" with the tag
 * that <key> has under this prefix, so that no other key is: hash-tagged
 * keys such as "{order}:42" are common, and another tag, or the same one
 * before another key, collides with nothing.  This runs before the key is
 * used, and costs more than a glance only for keys of a sibling's shape.
 */
static void
redis_check_key_not_reserved(const char *rkey, int rkeylen, int prefixlen)
{
	char	   *owner;
	int			ownerlen;
	int			i;

	for (i = 0; i < lengthof(sibling_kinds); i++)
		if ((owner = redis_sibling_owner(rkey, rkeylen, prefixlen, i,
										 &ownerlen)) != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("Redis key \"%s\" is reserved", rkey + prefixlen),
					 errdetail("It is where redislock keeps the %s of key \"%.*s\".",
							   sibling_kinds[i].what, ownerlen - prefixlen,
							   owner + prefixlen),
					 errhint("Choose a key that does not start with a number in braces followed by \":%s:\".",
							 sibling_kinds[i].kind)));
}

/*
 * The Redis key of a user's key (keylen bytes) under a server's key prefix:
 * the prefix, then the key, palloc'd and NUL-terminated.  A key that is
 * the sibling of another is refused before it is used.
 */
char *
redis_key(const char *prefix, const char *key, int keylen, int *rkeylen)
{
	int			prefixlen = strlen(prefix);
	char	   *rkey = palloc(prefixlen + keylen + 1);

	memcpy(rkey, prefix, prefixlen);
	memcpy(rkey + prefixlen, key, keylen);
	rkey[prefixlen + keylen] = '\0';
	redis_check_key_not_reserved(rkey, prefixlen + keylen, prefixlen);
	*rkeylen = prefixlen + keylen;
	return rkey;
}

/*
 * <prefix>{<slot tag>}:<kindname>:<key> for rkey (rkeylen bytes, the first
 * prefixlen of which are the server's key prefix, in hash slot `slot`),
 * palloc'd and NUL-terminated.
 */
static char *
slot_sibling(const char *rkey, int rkeylen, int prefixlen, int slot,
			 const char *kindname, int *len)
{
	int			kindlen = strlen(kindname);
	char		tag[12];
	int			taglen;
	char	   *sibling;
	char	   *p;

	Assert(slot == redis_key_slot(rkey, rkeylen));
	taglen = pg_ultoa_n(slot_tag(slot), tag);

	sibling = palloc(rkeylen + taglen + kindlen + 5);
	p = sibling;
	memcpy(p, rkey, prefixlen);
	p += prefixlen;
	*p++ = '{';
	memcpy(p, tag, taglen);
	p += taglen;
	*p++ = '}';
	*p++ = ':';
	memcpy(p, kindname, kindlen);
	p += kindlen;
	*p++ = ':';
	memcpy(p, rkey + prefixlen, rkeylen - prefixlen);
	p += rkeylen - prefixlen;
	*p = '\0';
	*len = p - sibling;
	return sibling;
}

/*
 * The sibling of kind `kind` of rkey (rkeylen bytes, the first prefixlen
 * of which are the server's key prefix, in hash slot `slot`), palloc'd and
 * NUL-terminated.
 */
char *
redis_sibling_key(const char *rkey, int rkeylen, int prefixlen, int slot,
				  RedisSiblingKind kind, int *len)
{
	return slot_sibling(rkey, rkeylen, prefixlen, slot,
						sibling_kinds[kind].kind, len);
}

/*
 * The pub/sub channel on which the waiter whose owner token is owner_token
 * is told that rkey (as for redis_sibling_key()) was released:
 * <prefix>{<slot tag>}:wake:<owner token>:<key>.  It stays inside the
 * prefix, where a Redis ACL channel pattern such as &shop:* confines it,
 * and hashes to the key's slot, so that a Cluster's sharded pub/sub serves
 * it on the key's node.  An owner token has a fixed number of colons, so
 * no two waiters or keys share a channel.  A channel is no key: user keys
 * of its shape take nothing's place.
 */
char *
redis_wake_channel(const char *rkey, int rkeylen, int prefixlen, int slot,
				   const char *owner_token, int *len)
{
	char	   *kindname = psprintf("wake:%s", owner_token);
	char	   *channel = slot_sibling(rkey, rkeylen, prefixlen, slot,
									   kindname, len);

	pfree(kindname);
	return channel;
}

/*
 * If rkey (rkeylen bytes, the first prefixlen of which are the server's key
 * prefix) is the sibling of kind `kind` of another key, that key, prefix
 * included, palloc'd and NUL-terminated, its length in *ownerlen; else
 * NULL.
 */
char *
redis_sibling_owner(const char *rkey, int rkeylen, int prefixlen,
					RedisSiblingKind kind, int *ownerlen)
{
	const char *kindname = sibling_kinds[kind].kind;
	int			kindlen = strlen(kindname);
	const char *end = rkey + rkeylen;
	const char *p = rkey + prefixlen + 1;
	const char *owner;
	char	   *owner_rkey;
	char	   *sibling;
	int			siblinglen;
	bool		same;

	/* the shape: {<digits>}:<kind>:<at least one byte> */
	if (rkeylen - prefixlen < 2 || rkey[prefixlen] != '{')
		return NULL;
	while (p < end && isdigit((unsigned char) *p))
		p++;
	if (p == rkey + prefixlen + 1 || end - p < kindlen + 4 ||
		p[0] != '}' || p[1] != ':' || memcmp(p + 2, kindname, kindlen) != 0 ||
		p[2 + kindlen] != ':')
		return NULL;
	owner = p + kindlen + 3;
	*ownerlen = prefixlen + (end - owner);

	/* and the tag that the key after it has */
	owner_rkey = palloc(*ownerlen + 1);
	memcpy(owner_rkey, rkey, prefixlen);
	memcpy(owner_rkey + prefixlen, owner, end - owner);
	owner_rkey[*ownerlen] = '\0';
	sibling = redis_sibling_key(owner_rkey, *ownerlen, prefixlen,
								redis_key_slot(owner_rkey, *ownerlen), kind,
								&siblinglen);
	same = siblinglen == rkeylen && memcmp(sibling, rkey, rkeylen) == 0;
	pfree(sibling);
	if (same)
		return owner_rkey;
	pfree(owner_rkey);
	return NULL;
}

/*
 * A SCAN pattern that matches every sibling of kind `kind` under prefix
 * (and a few other keys of the same shape, which redis_sibling_owner()
 * tells apart), palloc'd.
 */
char *
redis_sibling_pattern(const char *prefix, RedisSiblingKind kind)
{
	StringInfoData pattern;
	const char *p;

	initStringInfo(&pattern);
	for (p = prefix; *p; p++)
	{
		if (strchr("*?[]\\", *p) != NULL)
			appendStringInfoChar(&pattern, '\\');
		appendStringInfoChar(&pattern, *p);
	}
	appendStringInfo(&pattern, "{*}:%s:*", sibling_kinds[kind].kind);
	return pattern.data;
}

/*
 * Can keys under this prefix have siblings in their slot?  Only if a '{'
 * in the prefix opens a complete, non-empty hash tag within the prefix:
 * otherwise the slot of a key would depend on what follows the prefix in
 * a way a sibling cannot follow.
 */
bool
redis_prefix_is_valid(const char *prefix)
{
	const char *open = strchr(prefix, '{');
	const char *close;

	if (open == NULL)
		return true;
	close = strchr(open + 1, '}');
	return close != NULL && close > open + 1;
}

/* The keyspace channel of key in a server's database */
char *
redis_keyspace_channel(int database, const char *key, int keylen, int *len)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "__keyspace@%d__:", database);
	appendBinaryStringInfo(&buf, key, keylen);
	*len = buf.len;
	return buf.data;
}

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
