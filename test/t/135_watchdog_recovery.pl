# The lease watchdog while its worker recovers stock on a Redis that
# answers nothing (stopped with SIGSTOP), with recovery asked for every
# 300 ms: each recovery step waits on that Redis no longer than until the
# next lease falls due, and the leases due are renewed between servers, so
# a lock with a 1.2 s lease on another Redis is never lost.  The slow
# server delays no renewal on the other.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RedisLockTest qw(session_query wait_until session works);

my $redis = RedisLockTest->start_redis();
my $stuck = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('watchdog_recovery', $redis,
	conf => "shared_preload_libraries = 'redislock'\nredislock.recover_interval = 300");
my $stuck_port = $stuck->port;
$node->safe_psql('postgres', qq{
	CREATE SERVER stuck FOREIGN DATA WRAPPER redislock
	  OPTIONS (host '127.0.0.1', port '$stuck_port');
	GRANT USAGE ON FOREIGN SERVER stuck TO PUBLIC;
});

my $holder = session($node);
session_query($holder, 'SET redislock.server = stuck');
works($holder, "SELECT redis_stock_set('item', 5); SELECT redis_stock_get('item')", "\n5",
	'the second server holds stock');
session_query($holder, 'RESET redislock.server');

$stuck->pause;
ok(defined wait_until(10, sub {
	$node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'recovering Redis stock on server stuck%'") eq '1' }),
	'the worker recovers on the server whose Redis answers nothing');

works($holder, "SELECT redis_lock_acquire_session('r:lock', 1200)", 't',
	'a session lock with a 1.2 s lease on the other server');
my $bad = 0;
my $end = time + 6;
while (time < $end)
{
	my $set = $redis->command('SET', 'r:lock', 'foreign', 'NX', 'PX', '60000');
	$bad++ if defined $set && $set eq 'OK';
	$bad++ if $redis->command('PTTL', 'r:lock') <= 0;
	usleep(100_000);
}
is($bad, 0,
	'for 6 s, a foreign SET NX never gets the key and its PTTL stays positive');
my ($lost) = session_query($holder,
	"SELECT leases_lost FROM redis_stats() WHERE server = 'redislock'");
is($lost, '0', 'no lease was lost');
works($holder, "SELECT redis_lock_release('r:lock')", 't',
	'the session still holds the lock and releases it');

$stuck->resume;
$holder->quit;
$node->stop;
$redis->stop;
$stuck->stop;

done_testing();
