/*-------------------------------------------------------------------------
 *
 * stockscripts.c
 *		The Lua scripts of Redis stock: the decrement, its give-back, and
 *		setting the stock; their digests are computed with the others'
 *		(scripts.c).
 *
 * Every step runs as one script so that Redis executes it atomically.
 * User data never becomes Lua source: keys travel as KEYS and values as
 * ARGV.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "scripts.h"

/*
 * A prelude for scripts that write more than once.  Redis keeps a script's
 * earlier writes when a later command fails, and a later command can fail
 * whatever the script checked first: a Redis ACL may deny any command.  So
 * each write goes through write(), given the command that undoes it (or
 * nil when nothing must be undone).  When a write fails, the undos of the
 * writes before it run newest first, stopping at the first that fails
 * itself.  write() returns the error, which the script then returns, or
 * nil and the write's reply.  Each script orders its writes so that a stop
 * there leaves a state it accounts for; an undo that repeats the write's
 * own command on the same key (DECRBY of the opposite quantity) cannot be
 * denied.
 */
#define UNDOABLE_WRITES \
	"local undo = {}\n" \
	"local function write(inverse, ...)\n" \
	"  local r = redis.pcall(...)\n" \
	"  if type(r) == 'table' and r.err then\n" \
	"    for i = #undo, 1, -1 do\n" \
	"      local u = redis.pcall(unpack(undo[i]))\n" \
	"      if type(u) == 'table' and u.err then\n" \
	"        break\n" \
	"      end\n" \
	"    end\n" \
	"    return r\n" \
	"  end\n" \
	"  if inverse then\n" \
	"    undo[#undo + 1] = inverse\n" \
	"  end\n" \
	"  return nil, r\n" \
	"end\n"

/*
 * Check stock and decrement it in one step, so that concurrent buyers can
 * never oversell, and record the decrement under its operation id, so that
 * whoever made it can always learn whether it happened.  The arithmetic is
 * Redis' own integer arithmetic: Lua numbers are doubles and would round
 * large stock.  Returns what remains (the number DECRBY answered while a
 * double holds it exactly, below 2^53, else read back as a string), -1
 * (changing nothing) when fewer than the requested units are left, or -2
 * (changing nothing) when the buyer, if one is named, has already bought
 * the item.  An absent or non-integer stock, and an overflow, are errors
 * that change nothing.  The record is written right after the units are
 * taken and before the buyer is marked: a failed write undoes the others,
 * newest first, stopping at an undo that fails too (as UNDOABLE_WRITES
 * does, spelled out here: this script runs once per order, and the
 * closure and tables of write() would cost Redis a sixth of it), and
 * should an undo fail, what stays is a recorded decrement, which its
 * give-back settles by its operation id.  First, whatever follows, the
 * records named from the fourth argument on are deleted: those of
 * committed decrements whose clears the caller held back (cleanup.c), each
 * of them a record that the caller may delete, or may lose the clear of.
 * KEYS: stock, operation records, buyers.  ARGV: quantity, operation id,
 * buyer ('' for none)[, operation ids of records to delete].
 */
RedisScript stock_decr_script = {
	"stock_decr",
	"if #ARGV > 3 then\n"
	"  redis.pcall('HDEL', KEYS[2], unpack(ARGV, 4))\n"
	"end\n"
	"local buyer = ARGV[3] ~= '' and ARGV[3]\n"
	"if redis.call('EXISTS', KEYS[1]) == 0 then\n"
	"  return redis.error_reply('NOSTOCK stock key does not exist')\n"
	"end\n"
	"if buyer and redis.call('SISMEMBER', KEYS[3], buyer) == 1 then\n"
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
	"  redis.call('DECRBY', KEYS[1], '-' .. ARGV[1])\n"
	"  return -1\n"
	"end\n"
	"local record = buyer and ARGV[1] .. ' ' .. buyer or ARGV[1]\n"
	"local err = redis.pcall('HSET', KEYS[2], ARGV[2], record)\n"
	"if type(err) == 'table' then\n"
	"  redis.pcall('DECRBY', KEYS[1], '-' .. ARGV[1])\n"
	"  return err\n"
	"end\n"
	"if buyer then\n"
	"  err = redis.pcall('SADD', KEYS[3], buyer)\n"
	"  if type(err) == 'table' then\n"
	"    if type(redis.pcall('HDEL', KEYS[2], ARGV[2])) ~= 'table' then\n"
	"      redis.pcall('DECRBY', KEYS[1], '-' .. ARGV[1])\n"
	"    end\n"
	"    return err\n"
	"  end\n"
	"end\n"
	"if left < 9007199254740992 then\n"
	"  return left\n"
	"end\n"
	"return redis.call('GET', KEYS[1])\n"
};

/*
 * Give back a decrement that will not commit, found by its operation id:
 * its units, and the buyer's right to buy.  Only a recorded decrement is
 * given back, and its record goes with it, so giving back is idempotent and
 * safe for a decrement whose outcome is unknown.  A deleted item is not
 * brought back to life.  The units go back before the record is deleted,
 * and a failed write undoes the others: should an undo fail too, the units
 * and the record still agree.  Returns 1 when given back, 0 when the stock
 * key is gone, -1 when there is no record (the decrement did not happen,
 * or was given back already).
 * KEYS: stock, operation records, buyers.  ARGV: operation id.
 */
RedisScript stock_giveback_script = {
	"stock_giveback",
	UNDOABLE_WRITES
	"local record = redis.call('HGET', KEYS[2], ARGV[1])\n"
	"if not record then\n"
	"  return -1\n"
	"end\n"
	"local qty, buyer = string.match(record, '^(%d+) ?(.*)$')\n"
	"local given = redis.call('EXISTS', KEYS[1])\n"
	"local err\n"
	"if given == 1 and qty ~= '0' then\n"
	"  err = write({'INCRBY', KEYS[1], '-' .. qty}, 'INCRBY', KEYS[1], qty)\n"
	"end\n"
	"if not err then\n"
	"  err = write({'HSET', KEYS[2], ARGV[1], record}, 'HDEL', KEYS[2], ARGV[1])\n"
	"end\n"
	"if not err and buyer ~= '' then\n"
	"  err = write(nil, 'SREM', KEYS[3], buyer)\n"
	"end\n"
	"if err then\n"
	"  return err\n"
	"end\n"
	"return given\n"
};

/*
 * Set the stock of an item to exactly the quantity given, also while
 * decrements of it are pending.  Their records stay, with their buyers,
 * but the quantity each would give back becomes 0: the units they took
 * were counted in the stock that the new quantity replaces.  So whether
 * they commit or roll back, the stock stays what was set; a buyer whose
 * purchase rolls back may buy again, and one whose purchase commits, or
 * who bought before, may not.  The records are rewritten first and the
 * stock last, each write undone if a later one fails.  Returns OK.
 * KEYS: stock, operation records, buyers (untouched).  ARGV: quantity.
 */
RedisScript stock_set_script = {
	"stock_set",
	UNDOABLE_WRITES
	"local records = redis.call('HGETALL', KEYS[2])\n"
	"local err\n"
	"for i = 1, #records, 2 do\n"
	"  local qty, buyer = string.match(records[i + 1], '^(%d+)( ?.*)$')\n"
	"  if qty and qty ~= '0' then\n"
	"    err = write({'HSET', KEYS[2], records[i], records[i + 1]},\n"
	"                'HSET', KEYS[2], records[i], '0' .. buyer)\n"
	"    if err then\n"
	"      return err\n"
	"    end\n"
	"  end\n"
	"end\n"
	"local done\n"
	"err, done = write(nil, 'SET', KEYS[1], ARGV[1])\n"
	"return err or done\n"
};
