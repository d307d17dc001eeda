# redis_stock_decrements has no index: a decrement writes its row and
# nothing more, and redis_stock_recover() decides all the records it finds
# by one read of the table.  Among records of committed decrements (their
# rows are there, their clears lost) and records of transactions that
# ended without a row, on two items, each record is decided by its own row:
# the committed ones are cleared with their units kept, the others given
# back.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(wait_until);

my $redis = RedisLockTest->start_redis();
# Rows go as soon as a recovery finds their records gone.
my $node = RedisLockTest->new_node('batch', $redis, conf => 'redislock.purge_delay = 0');

# The keys of the items' records (the hashes go when their last record
# does).
sub records_keys
{
	return join ' ', sort $redis->keys('*:ops:*');
}

is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_index WHERE indrelid = 'redis_stock_decrements'::regclass"),
	'0',
	'the table of decrements has no index');

$node->safe_psql('postgres',
	"SELECT redis_stock_set('a', 100); SELECT redis_stock_set('b', 100)");
$node->safe_psql('postgres',
	join '', map { "BEGIN; SELECT redis_stock_decr('a', 1); SELECT redis_stock_decr('b', 2); COMMIT;\n" } 1 .. 20);
is($node->safe_psql('postgres', 'SELECT count(*) FROM redis_stock_decrements'),
	'40', 'each decrement wrote one row');
is($redis->command('GET', 'a') . ' ' . $redis->command('GET', 'b'),
	'80 60', 'the committed decrements took their units');
ok(defined wait_until(10, sub { records_keys() eq '' }),
	'and their records are cleared, the last as the session ends');

# Their records come back, as if their clears had been lost.
my (%records_key, $prefix);
for my $row (split /\n/,
	$node->safe_psql('postgres',
		"SELECT op, encode(records, 'escape') FROM redis_stock_decrements"))
{
	my ($op, $records) = split /\|/, $row;
	my $qty = $records =~ /:a\z/ ? 1 : 2;
	$records_key{$qty} = $records;
	($prefix) = $op =~ /\A((?:[0-9]+:){4})/;
	$redis->command('HSET', $records, $op, $qty);
}

# Records of transactions that ended without a row, whose units were
# taken: 20 of each item, under ids of this cluster, timeline, database and installation.
for (1 .. 20)
{
	my $xid = $node->safe_psql('postgres', 'SELECT pg_current_xact_id()');
	$redis->command('HSET', $records_key{1}, "$prefix$xid:1", '1');
	$redis->command('HSET', $records_key{2}, "$prefix$xid:2", '2');
}
$redis->command('DECRBY', 'a', 20);
$redis->command('DECRBY', 'b', 40);

is( $node->safe_psql('postgres',
		'SELECT key, outcome, count(*), sum(qty) FROM redis_stock_recover() GROUP BY 1, 2 ORDER BY 1, 2'),
	join("\n", 'a|aborted|20|20', 'a|committed|20|20', 'b|aborted|20|40',
		'b|committed|20|40'),
	'recover decides each record by its own row');
is($redis->command('GET', 'a') . ' ' . $redis->command('GET', 'b'),
	'80 60', 'the units of the rowless records are back, the committed kept');
is(records_keys(), '', 'no record is left');
is($node->safe_psql('postgres', 'SELECT count(*) FROM redis_stock_decrements'),
	'0', 'and the rows of the cleared records are deleted');

$node->stop;
$redis->stop;

done_testing();
