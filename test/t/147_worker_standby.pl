# On a hot standby, where locks are taken as on a primary, their leases are
# renewed and their waiters woken: the launcher and the database worker
# start once the standby is consistent.  Recovery, which writes, waits for
# a promotion.
# - a session lock with a 1 s lease, taken on the standby and held 4 s,
#   is never taken by a foreign client and is released as ours;
# - a database worker runs there, and no recovery was tried;
# - once promoted, the former standby recovers stock: the row of a
#   committed decrement whose record is gone is deleted by the periodic
#   recovery.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(wait_until session works foreign_attempts);

my $redis = RedisLockTest->start_redis();
my $port = $redis->port;
my $primary = PostgreSQL::Test::Cluster->new('standby_primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', join("\n",
		"shared_preload_libraries = 'redislock'",
		"redislock.recover_interval = '1s'",
		"redislock.purge_delay = 0"));
$primary->start;
RedisLockTest->setup_node($primary, $redis);
$primary->backup('backup');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't',
	'the standby is in recovery');

my $holder = session($standby);
works($holder, "SELECT redis_lock_acquire_session('standby:lock', 1000)", 't',
	'a session on the standby takes a lock with a 1 s lease');
is(foreign_attempts($redis, 'standby:lock', 4), 0, 'for 4 s, a foreign SET NX never gets the key and its PTTL stays positive');
works($holder, "SELECT redis_lock_release('standby:lock')", 't',
	'the session still holds the lock and releases it');
is( $standby->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'redislock worker' AND datname = 'postgres'"),
	'1', 'a database worker runs on the standby');
$holder->quit;

my $log = slurp_file($standby->logfile);
unlike($log, qr/could not recover Redis stock|read-only transaction|during recovery/,
	'no recovery was tried on the standby');

$primary->stop;
$standby->promote;
$standby->safe_psql('postgres',
	"SELECT redis_stock_set('promoted', 5); SELECT redis_stock_decr('promoted', 1, 'buyer')");
ok( defined wait_until(
		15,
		sub {
			$standby->safe_psql('postgres',
				'SELECT count(*) FROM redis_stock_decrements') eq '0';
		}),
	'once promoted, its periodic recovery deletes the row of a committed decrement');

$standby->stop;
$redis->stop;

done_testing();
