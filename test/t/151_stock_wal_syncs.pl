# A decrement flushes no WAL of its own and forces no synchronous commit:
# over 1,000 transactions of one decrement each, pg_stat_wal (pg_stat_io
# from PostgreSQL 18 on; 13 counts none, and the test is skipped) counts at most
# one WAL sync per transaction with synchronous_commit on (the commit's
# own), and next to none with it off (the WAL writer's, a few a second).
# With it off, the records of the last commits wait for WAL to be flushed
# when the session ends, and recover clears them as committed.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest;

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('walsync', $redis, conf => 'fsync = on');
$node->safe_psql('postgres', 'SELECT redis_stock_set(\'s\', 1000000)');

my $version = $node->safe_psql('postgres', 'SHOW server_version_num');
plan skip_all => 'PostgreSQL 13 counts no WAL syncs' if $version < 140000;
my ($reset, $count) = $version >= 180000
  ? ("SELECT pg_stat_reset_shared('io')",
	"SELECT sum(fsyncs) FROM pg_stat_io WHERE object = 'wal'")
  : ("SELECT pg_stat_reset_shared('wal')", 'SELECT wal_sync FROM pg_stat_wal');

my $transactions = 1000;

# WAL syncs per transaction over $transactions decrements, each in a
# transaction of its own, with synchronous_commit set to $setting.  The
# session ends before the count is read, so that its statistics are in.
sub syncs_per_transaction
{
	my ($setting) = @_;
	$node->safe_psql('postgres', $reset);
	$node->safe_psql('postgres',
		"SET synchronous_commit = $setting;\n"
		  . "SELECT redis_stock_decr('s');\n" x $transactions);
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND query LIKE '%redis_stock_decr%'"
	);
	return $node->safe_psql('postgres', $count) / $transactions;
}

my $on = syncs_per_transaction('on');
cmp_ok($on, '>=', 0.9, "synchronous_commit on: the commits sync WAL ($on per transaction)");
cmp_ok($on, '<=', 1.05, 'and nothing else does');

my $off = syncs_per_transaction('off');
cmp_ok($off, '<=', 0.05, "synchronous_commit off: next to no WAL sync ($off per transaction)");

is($redis->command('GET', 's'), 1000000 - 2 * $transactions, 'every decrement took its unit');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM redis_stock_recover() WHERE outcome <> 'committed'"),
	'0',
	'recover finds committed the records whose commits the session did not see flushed');
is($node->safe_psql('postgres', 'SELECT count(*) FROM redis_stock_recover()'),
	'0', 'and clears them');
is($redis->command('GET', 's'), 1000000 - 2 * $transactions, 'keeping their units taken');

$node->stop;
$redis->stop;

done_testing();
