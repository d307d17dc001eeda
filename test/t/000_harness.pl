# Checks the test harness itself: RedisLockTest starts, stops, kills and
# restarts a Redis, and gives a PostgreSQL node with the extension set up.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest;

my $redis = RedisLockTest->start_redis();
like($redis->port, qr/^\d+$/, 'redis has a port');
is($redis->cli('ping'), 'PONG', 'redis answers PING');

$redis->cli('set', 'harness:key', 'v');
is($redis->cli('get', 'harness:key'), 'v', 'redis-cli arguments are passed through');

$redis->kill9;
like($redis->cli('ping'), qr/Could not connect/, 'redis is gone after kill9');

$redis->restart;
is($redis->cli('ping'), 'PONG', 'redis answers again after restart');
is($redis->cli('exists', 'harness:key'), '0', 'restarted redis kept no data');

my $node = RedisLockTest->new_node('main', $redis);
is($node->safe_psql('postgres', 'SELECT 1'), '1', 'node answers');
my $port = $redis->port;
is( $node->safe_psql(
		'postgres',
		"SELECT 'port=$port' = ANY (srvoptions) FROM pg_foreign_server WHERE srvname = 'redislock'"
	),
	't',
	'server redislock points at the test redis');

$node->stop;
$redis->stop;
like($redis->cli('ping'), qr/Could not connect/, 'redis is gone after stop');

done_testing();
