# With redislock preloaded, the background worker also recovers stock every
# redislock.recover_interval, not only at start: the rows of committed
# decrements, whose records were cleared after commit, are deleted with
# nobody calling redis_stock_recover(), and with the interval at 0 they
# stay.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(wait_until);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('sweep', $redis, conf => join("\n",
		"shared_preload_libraries = 'redislock'",
		"redislock.recover_interval = 0",
		"redislock.purge_delay = '1s'"));

sub rows
{
	return $node->safe_psql('postgres',
		'SELECT count(*) FROM redis_stock_decrements');
}

# n decrements of one unit, by buyers named after who
sub buy
{
	my ($who, $n) = @_;
	$node->safe_psql('postgres',
		"SELECT redis_stock_decr('sweep', 1, '$who' || g) FROM generate_series(1, $n) g");
}

sub set_interval
{
	my ($interval) = @_;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET redislock.recover_interval = '$interval'; SELECT pg_reload_conf()");
}

$node->safe_psql('postgres', "SELECT redis_stock_set('sweep', 10)");
buy('first', 3);
ok(defined wait_until(10, sub { $redis->command('HLEN', '{sweep}:ops:sweep') eq '0' }),
	'the records of three committed decrements are cleared as their session ends');
sleep 3;
is(rows(), '3', 'with the interval at 0, their rows stay');

set_interval('2s');
ok(defined wait_until(15, sub { rows() eq '0' }),
	'with an interval of 2 s, the worker deletes them, nobody calling recover, a sweep after it found their records gone');
is($node->safe_psql('postgres', "SELECT redis_stock_get('sweep')"), '7',
	'and the stock is untouched');

set_interval('0');
ok( defined wait_until(
		15,
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'redislock recovery'"
			) eq '0';
		}),
	'at 0 again, the last recovery finishes');
sleep 3;
buy('second', 2);
sleep 5;
is(rows(), '2', 'at 0 again, new rows stay');

$node->stop;
$redis->stop;

done_testing();
