# Stock recovery never holds up the renewal of a lease: it runs in a
# recovery worker of its own, with pauses of its own.
# - The README's own set-up makes recovery fail for ever: Redis asks for a
#   password, the only user mapping is role app's, and the recovery runs as
#   the bootstrap superuser.  With its retries pausing for seconds, a
#   transaction of app holding a lock with a 1 s lease through 4 s still
#   commits, and no foreign client gets the key meanwhile.
# - A recovery blocked on a lock of redis_stock_decrements (an open
#   transaction holds it ACCESS EXCLUSIVE) leaves the renewals alone: a
#   lock with a 1 s lease held through 5 s of that stays ours.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query start_query finish_query wait_until session works
  foreign_attempts);

my $redis = RedisLockTest->start_redis(args => [ '--requirepass', 'pw' ], password => 'pw');
my $node = RedisLockTest->new_node('recovery_apart', $redis,
	conf => "shared_preload_libraries = 'redislock'");
$node->safe_psql('postgres', q{
	CREATE ROLE app LOGIN;
	CREATE USER MAPPING FOR app SERVER redislock OPTIONS (password 'pw');
});

# --- a recovery that fails for ever
my $log_offset = -s $node->logfile;
$node->restart;
my $failure = qr/LOG:  could not recover Redis stock on server "redislock" in database "postgres"/;
ok( defined wait_until(
		20,
		sub {
			my @failures = slurp_file($node->logfile, $log_offset) =~ /$failure/g;
			return @failures >= 3;
		}),
	'the recovery of postgres fails, three times, its pauses growing');

my $app = session($node);
session_query($app, 'SET ROLE app');
start_query($app, "BEGIN; SELECT redis_lock_acquire('apart:xact', 1000); SELECT pg_sleep(4); COMMIT");
ok(defined wait_until(5, sub { $redis->command('EXISTS', 'apart:xact') eq '1' }),
	'app takes a lock with a 1 s lease in a transaction');
my $bad = foreign_attempts($redis, 'apart:xact', 3);
my ($out, $err) = finish_query($app, 30);
is($bad, 0, 'while recovery fails, no foreign SET NX gets the key and its PTTL stays positive');
is($err, '', 'the transaction, 4 s long, commits');

# --- a recovery blocked on the decisions table
$node->safe_psql('postgres', q{
	CREATE USER MAPPING FOR CURRENT_USER SERVER redislock OPTIONS (password 'pw');
	ALTER SYSTEM SET redislock.recover_interval = '1s';
	SELECT pg_reload_conf();
});
works($app, "SELECT redis_lock_acquire_session('apart:session', 1000)", 't',
	'app takes a session lock with a 1 s lease');
my $blocker = session($node);
works($blocker, 'BEGIN; LOCK TABLE redis_stock_decrements IN ACCESS EXCLUSIVE MODE', '',
	'a transaction holds the decisions table');
ok( defined wait_until(
		15,
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'redislock%' AND wait_event_type = 'Lock'"
			) eq '1';
		}),
	'a recovery waits for it');
is(foreign_attempts($redis, 'apart:session', 5), 0,
	'for 5 s, a foreign SET NX never gets the key and its PTTL stays positive');
works($app, "SELECT redis_lock_release('apart:session')", 't',
	'the session still holds the lock and releases it');
works($blocker, 'ROLLBACK', '', 'the decisions table is free again');

$app->quit;
$blocker->quit;
$node->stop;
$redis->stop;

done_testing();
