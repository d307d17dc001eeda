/*-------------------------------------------------------------------------
 *
 * scripts.c
 *		The Lua scripts redislock runs in Redis, and their SHA-1 digests.
 *
 * Every compare-and-act step runs as one script so that Redis executes it
 * atomically.  User data never becomes Lua source: keys travel as KEYS and
 * values as ARGV.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/sha1.h"

#include "redislock.h"

/*
 * Take the lock when it is free (SET NX PX, as every Redis lock client
 * does) and draw its fencing token in the same step.  A lock that already
 * carries our token is ours: that happens when an earlier command's outcome
 * was unknown.  The token is Redis' clock in microseconds, or one more than
 * the last token when that is not smaller, and it is kept beside the lock
 * only as long as the lease; successive holders get increasing tokens as
 * long as Redis' clock does not go back by more than a lease.  Tokens are
 * compared as digit strings and incremented by INCR, never through Lua's
 * doubles, so they stay exact.  The token key is checked before anything
 * is written, so that a failing script leaves no lock behind.  Returns the
 * token (a string), or 0 when someone else holds the lock.
 * KEYS: lock, fencing token.  ARGV: owner token, ttl in ms.
 */
RedisScript acquire_script = {
	"acquire",
	"local last = redis.call('GET', KEYS[2])\n"
	"if last and not string.match(last, '^[1-9]%d*$') then\n"
	"  return redis.error_reply('NOTINT fencing token key does not hold a positive integer')\n"
	"end\n"
	"if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
	"  if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
	"    return 0\n"
	"  end\n"
	"  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"end\n"
	"local now = redis.call('TIME')\n"
	"local token = now[1] .. string.format('%06d', tonumber(now[2]))\n"
	"if last and (#last > #token or (#last == #token and last >= token)) then\n"
	"  redis.call('INCR', KEYS[2])\n"
	"  redis.call('PEXPIRE', KEYS[2], ARGV[2])\n"
	"  return redis.call('GET', KEYS[2])\n"
	"end\n"
	"redis.call('SET', KEYS[2], token, 'PX', ARGV[2])\n"
	"return token\n"
};

/*
 * Delete the lock only if it is still ours.  Returns 1 when deleted.
 * KEYS: lock.  ARGV: owner token.
 */
RedisScript release_script = {
	"release",
	"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	"  return redis.call('DEL', KEYS[1])\n"
	"end\n"
	"return 0\n"
};

/*
 * Undo an acquire that too few replicas acknowledged: delete the lock and
 * its fencing token only if the lock is ours.  Returns 1 when deleted.
 * KEYS: lock, fencing token.  ARGV: owner token.
 */
RedisScript abandon_script = {
	"abandon",
	"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	"  redis.call('DEL', KEYS[2])\n"
	"  return redis.call('DEL', KEYS[1])\n"
	"end\n"
	"return 0\n"
};

/*
 * Reset the lease of the lock, and of its fencing token, only if the lock
 * is still ours.  Returns 1 when renewed.
 * KEYS: lock, fencing token.  ARGV: owner token, ttl in ms.
 */
RedisScript extend_script = {
	"extend",
	"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
	"  redis.call('PEXPIRE', KEYS[2], ARGV[2])\n"
	"  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"end\n"
	"return 0\n"
};

/*
 * Check stock and decrement it in one step, so that concurrent buyers can
 * never oversell, and record the decrement under its operation id, so that
 * whoever made it can always learn whether it happened.  The arithmetic is
 * Redis' own integer arithmetic: Lua numbers are doubles and would round
 * large stock.  Returns what remains (as a string, for the same reason),
 * -1 (changing nothing) when fewer than the requested units are left, or
 * -2 (changing nothing) when the buyer, if one is named, has already bought
 * the item.  An absent or non-integer stock, and an overflow, are errors
 * that change nothing.
 * KEYS: stock, operation records, buyers.  ARGV: quantity, operation id[,
 * buyer].
 */
RedisScript stock_decr_script = {
	"stock_decr",
	"if redis.call('EXISTS', KEYS[1]) == 0 then\n"
	"  return redis.error_reply('NOSTOCK stock key does not exist')\n"
	"end\n"
	"if ARGV[3] and redis.call('SISMEMBER', KEYS[3], ARGV[3]) == 1 then\n"
	"  return -2\n"
	"end\n"
	"local left = redis.pcall('DECRBY', KEYS[1], ARGV[1])\n"
	"if type(left) == 'table' then\n"
	"  if string.find(left.err, 'overflow') then\n"
	"    return redis.error_reply('OVERFLOW ' .. left.err)\n"
	"  elseif string.find(left.err, 'not an integer') then\n"
	"    return redis.error_reply('NOTINT ' .. left.err)\n"
	"  end\n"
	"  return left\n"
	"end\n"
	"if left < 0 then\n"
	"  redis.call('INCRBY', KEYS[1], ARGV[1])\n"
	"  return -1\n"
	"end\n"
	"local record = ARGV[1]\n"
	"if ARGV[3] then\n"
	"  redis.call('SADD', KEYS[3], ARGV[3])\n"
	"  record = record .. ' ' .. ARGV[3]\n"
	"end\n"
	"redis.call('HSET', KEYS[2], ARGV[2], record)\n"
	"return redis.call('GET', KEYS[1])\n"
};

/*
 * Give back a decrement that will not commit, found by its operation id:
 * its units, and the buyer's right to buy.  Only a recorded decrement is
 * given back, and its record goes with it, so giving back is idempotent and
 * safe for a decrement whose outcome is unknown.  A deleted item is not
 * brought back to life.  Returns 1 when given back, 0 when the stock key is
 * gone, -1 when there is no record (the decrement did not happen, or was
 * given back already).
 * KEYS: stock, operation records, buyers.  ARGV: operation id.
 */
RedisScript stock_giveback_script = {
	"stock_giveback",
	"local record = redis.call('HGET', KEYS[2], ARGV[1])\n"
	"if not record then\n"
	"  return -1\n"
	"end\n"
	"local qty, buyer = string.match(record, '^(%d+) ?(.*)$')\n"
	"local given = 0\n"
	"if redis.call('EXISTS', KEYS[1]) == 1 then\n"
	"  redis.call('INCRBY', KEYS[1], qty)\n"
	"  given = 1\n"
	"end\n"
	"redis.call('HDEL', KEYS[2], ARGV[1])\n"
	"if buyer ~= '' then\n"
	"  redis.call('SREM', KEYS[3], buyer)\n"
	"end\n"
	"return given\n"
};

/* Hex SHA-1 of a script body, as Redis computes it for EVALSHA */
static void
compute_sha1(RedisScript *script)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA1);
	uint8		digest[SHA1_DIGEST_LENGTH];
	int			i;

	if (ctx == NULL ||
		pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) script->body,
							 strlen(script->body)) < 0 ||
		pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		elog(ERROR, "could not compute SHA-1 of Redis script \"%s\"",
			 script->name);
	pg_cryptohash_free(ctx);

	for (i = 0; i < SHA1_DIGEST_LENGTH; i++)
		snprintf(script->sha1 + i * 2, 3, "%02x", digest[i]);
}

/*
 * Compute the digests, once per backend.  This runs at a backend's first
 * call rather than in _PG_init: the digest needs a resource owner, which a
 * postmaster loading shared_preload_libraries does not have.
 */
void
redislock_init_scripts(void)
{
	static bool done = false;

	if (done)
		return;
	compute_sha1(&acquire_script);
	compute_sha1(&release_script);
	compute_sha1(&abandon_script);
	compute_sha1(&extend_script);
	compute_sha1(&stock_decr_script);
	compute_sha1(&stock_giveback_script);
	done = true;
}
