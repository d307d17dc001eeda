# A reload does not postpone the periodic recovery: with
# redislock.recover_interval at 2 s and pg_reload_conf() every 300 ms, the
# rows of committed decrements whose records are gone are still deleted
# within 10 s, nobody calling redis_stock_recover().  Only a change of the
# interval reschedules the next recovery.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RedisLockTest qw(wait_until);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('reload', $redis, conf => join("\n",
		"shared_preload_libraries = 'redislock'",
		"redislock.recover_interval = 0",
		"redislock.purge_delay = 0"));

sub rows
{
	return $node->safe_psql('postgres',
		'SELECT count(*) FROM redis_stock_decrements');
}

$node->safe_psql('postgres', "SELECT redis_stock_set('reload', 10)");
$node->safe_psql('postgres',
	"SELECT redis_stock_decr('reload', 1, 'buyer' || g) FROM generate_series(1, 3) g");
ok( defined wait_until(
		10,
		sub {
			my $records = $redis->sibling('', 'ops', 'reload');
			return !defined $records || $redis->command('HLEN', $records) eq '0';
		}),
	'the records of three committed decrements are cleared as their session ends');
is(rows(), '3', 'their rows stay, with no periodic recovery');

$node->safe_psql('postgres',
	"ALTER SYSTEM SET redislock.recover_interval = '2s'; SELECT pg_reload_conf()");
my $deleted;
my $t0 = time;
while (time - $t0 < 10)
{
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	if (rows() eq '0')
	{
		$deleted = time - $t0;
		last;
	}
	usleep(300_000);
}
ok(defined $deleted,
	sprintf 'with reloads every 300 ms, the worker still recovers every 2 s and deletes them (%.1f s)',
	$deleted // -1);
is($node->safe_psql('postgres', "SELECT redis_stock_get('reload')"), '7',
	'and the stock is untouched');

$node->stop;
$redis->stop;

done_testing();
