# The lease watchdog, with redislock preloaded, on one Redis.  A foreign
# client (a raw SET NX PX, as every Redis lock client takes a lock) tries
# the key of a lock with a 2 s lease all along:
# - held through a 7 s transaction, the lock is never taken by it and its
#   PTTL stays positive; COMMIT, with verify_before_commit, succeeds; the
#   renewals column and redis_stats().renewals move;
# - the same for a session lock held by a session idle for 7 s;
# - after a SIGKILL of the holder, the key expires within ttl_ms + 1 s;
# - with redislock.lease_renewal_limit = 3 s, a lock held 8 s outlives its
#   ttl, then is lost, and COMMIT fails with 40001, the loss counted;
# - a key taken by another owner is found lost by the watchdog, which
#   counts it, and COMMIT fails with 40001;
# - with redislock.lease_renewal off, the session's lock is not renewed;
# - DROP DATABASE is not kept waiting by a worker that renews there, or
#   stays there for more locks to renew.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RedisLockTest qw(session_query wait_until session works foreign_attempts);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('watchdog', $redis,
	conf => "shared_preload_libraries = 'redislock'\nrestart_after_crash = on");

# The counters of server redislock: "renewals|leases_lost".
sub counters
{
	return $node->safe_psql('postgres',
		"SELECT renewals || '|' || leases_lost FROM redis_stats() WHERE server = 'redislock'");
}

my $holder = session($node);
my $viewer = session($node);

# --- a 2 s lease held through a 7 s transaction
my ($renewals0) = split /\|/, counters();
works($holder, "BEGIN; SELECT redis_lock_acquire('w:xact', 2000)",
	't', 'a transaction takes a lock with a 2 s lease');
is(foreign_attempts($redis, 'w:xact', 7), 0,
	'for 7 s, a foreign SET NX never gets the key and its PTTL stays positive');
my ($renewals) = session_query($viewer,
	"SELECT renewals FROM redis_locks() WHERE key = 'w:xact'");
cmp_ok($renewals, '>=', 5, "the lock's renewals column counts the renewals ($renewals)");
works($holder, 'COMMIT', '', 'COMMIT, with verify_before_commit, succeeds');
my ($renewals1) = split /\|/, counters();
cmp_ok($renewals1 - $renewals0, '>=', 5,
	'redis_stats().renewals moves by the renewals');
is($redis->command('EXISTS', 'w:xact'), '0', 'and the commit released the lock');

# --- the same lease held by a session idle for 7 s
works($holder, "SELECT redis_lock_acquire_session('w:session', 2000)",
	't', 'a session lock with a 2 s lease');
is(foreign_attempts($redis, 'w:session', 7), 0,
	'for 7 s of an idle session, a foreign SET NX never gets the key and its PTTL stays positive');
works($holder, "SELECT redis_lock_release('w:session')", 't',
	'the session still holds it and releases it');

# --- lease_renewal_limit: renewal stops 3 s after the grant
my ($lost0) = (split /\|/, counters())[1];
works($holder,
	"SET redislock.lease_renewal_limit = '3s'; BEGIN; SELECT redis_lock_acquire('w:limited', 2000)",
	't', 'with a renewal limit of 3 s, a transaction takes a lock with a 2 s lease');
sleep 3;
cmp_ok($redis->command('PTTL', 'w:limited'), '>', 0,
	'after 3 s the lock is still held: it was renewed until the limit');
ok(defined wait_until(6, sub { $redis->command('EXISTS', 'w:limited') eq '0' }),
	'then the lease runs out');
sleep 1;
my ($out, $err) = session_query($holder, 'COMMIT');
like($err, qr/ERROR:  40001: Redis lock "w:limited" on server "redislock" was lost before commit/,
	'COMMIT after 8 s fails with 40001');
is((split /\|/, counters())[1] - $lost0, 1, 'the lost lease is counted');
works($holder, 'RESET redislock.lease_renewal_limit', '', 'the limit reset');

# --- a lease found lost by the watchdog
$lost0 = (split /\|/, counters())[1];
works($holder, "BEGIN; SELECT redis_lock_acquire('w:stolen', 2000)",
	't', 'a transaction takes a lock');
$redis->command('SET', 'w:stolen', 'another owner', 'PX', '60000');
ok( defined wait_until(5, sub { (split /\|/, counters())[1] - $lost0 == 1 }),
	'when another owner has the key, the watchdog finds the lease lost and counts it');
($out, $err) = session_query($holder, 'COMMIT');
like($err, qr/ERROR:  40001: Redis lock "w:stolen" on server "redislock" was lost before commit/,
	'and COMMIT fails with 40001');
is($redis->command('GET', 'w:stolen'), 'another owner', "leaving the other owner's key alone");
is((split /\|/, counters())[1] - $lost0, 1, 'the loss is counted once');

# --- lease_renewal off for a session
works($holder,
	"SET redislock.lease_renewal = off; SELECT redis_lock_acquire_session('w:off', 2000)",
	't', 'with lease_renewal off, a session lock with a 2 s lease');
my $t0 = time;
ok(defined wait_until(5, sub { $redis->command('EXISTS', 'w:off') eq '0' }),
	'is not renewed: it expires');
cmp_ok(time - $t0, '<', 2.5, 'within its ttl');
works($viewer, "SELECT renewals FROM redis_locks() WHERE key = 'w:off'",
	'0', 'and shows no renewal');
($out, $err) = session_query($holder, "SELECT redis_lock_release('w:off')");
is($out, 'f', 'its release finds the lease lost');
works($holder, 'RESET redislock.lease_renewal', '', 'renewal on again');

# --- DROP DATABASE while the worker there renews, or waits for more locks
$node->safe_psql('postgres', 'CREATE DATABASE gone');
$node->safe_psql('gone',
	"CREATE EXTENSION redislock; ALTER SERVER redislock OPTIONS (SET port '${\$redis->port}')");
my $gone = $node->background_psql('gone', on_error_stop => 0, timeout => 60);
session_query($gone, "SELECT redis_lock_acquire_session('w:gone', 2000)");
ok( defined wait_until(
		5,
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'redislock worker' AND datname = 'gone'"
			) eq '1';
		}),
	'a worker renews in another database');
$gone->quit;
$t0 = time;
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE gone');
is("$ret$stderr", '0', 'DROP DATABASE succeeds while that worker waits for more locks');
cmp_ok(time - $t0, '<', 5, 'without waiting for it to leave by itself');

# --- SIGKILL of the holder
my ($pid) = session_query($holder, 'SELECT pg_backend_pid()');
works($holder, "SELECT redis_lock_acquire_session('w:killed', 2000)",
	't', 'a session lock with a 2 s lease');
sleep 3;
cmp_ok($redis->command('PTTL', 'w:killed'), '>', 0, 'renewed past its ttl');
$t0 = time;
kill 'KILL', $pid;
my $secs = wait_until(10, sub { $redis->command('EXISTS', 'w:killed') eq '0' });
ok(defined $secs && $secs < 3,
	sprintf 'after a SIGKILL of the holder, the key expires within ttl_ms + 1 s (%.2f s)',
	$secs // -1);
$holder->quit;
$viewer->quit;
ok($node->poll_query_until('postgres', 'SELECT true'), 'the server restarted');

$node->stop;
$redis->stop;

done_testing();
