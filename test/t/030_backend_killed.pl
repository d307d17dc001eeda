# A backend ending while it holds Redis locks.  Terminated normally
# (pg_terminate_backend), it releases its locks at exit and gives back the
# decrements of its open transaction; killed with SIGKILL (after which the
# postmaster also ends every other backend and restarts), nothing runs, and
# the locks last until their TTL.  Keys held by other clients are never
# touched.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use RedisLockTest qw(session_query terminate_backend);

# Poll until none of the keys exists in Redis or $limit seconds have passed;
# returns the seconds it took, or undef on time-out.
sub wait_keys_gone
{
	my ($redis, $limit, @keys) = @_;
	my $t0 = [gettimeofday];
	while (tv_interval($t0) < $limit)
	{
		return tv_interval($t0) if $redis->cli('EXISTS', @keys) eq '0';
		usleep(20_000);
	}
	return undef;
}

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('killed', $redis);
# The test framework turns crash restarts off; this test needs them.
$node->append_conf('postgresql.conf', 'restart_after_crash = on');
$node->reload;

# A lock another client holds, and stock.
is($redis->cli('SET', 'other', 'someone', 'NX', 'PX', '60000'), 'OK',
	'another client holds key "other"');
$node->safe_psql('postgres', "SELECT redis_stock_set('stk', 5)");

# --- pg_terminate_backend: locks released at exit
my $sa = $node->background_psql('postgres', on_error_stop => 0, timeout => 30);
$sa->set_query_timer_restart;
my ($pid_a) = session_query($sa, 'SELECT pg_backend_pid()');
my ($out, $err) = session_query(
	$sa, q{
	SELECT redis_lock_acquire_session('k1', 60000);
	SELECT redis_lock_acquire_session('k2', 60000);
	SELECT redis_lock_acquire_session('k2', 60000);
	BEGIN;
	SELECT redis_lock_acquire('k3', 60000);
	SELECT redis_stock_decr('stk', 2);
});
is($out, "t\nt\nt\nt\n3", 'session locks, a transaction lock and a decrement');
is($redis->cli('EXISTS', 'k1', 'k2', 'k3'), '3', 'the three locks are in Redis');
is($redis->cli('GET', 'stk'), '3', 'the decrement is in Redis');

my $t0 = [gettimeofday];
ok(terminate_backend($node, $pid_a), 'backend terminated');
my $gone = wait_keys_gone($redis, 5, 'k1', 'k2', 'k3');
ok(defined $gone, 'locks of the terminated backend are deleted');
cmp_ok(tv_interval($t0), '<', 3,
	'promptly at exit, long before their 60 s TTL');
is($redis->cli('GET', 'stk'), '5',
	'the decrement of the open transaction was given back');
is($redis->cli('GET', 'other'), 'someone', 'the other client\'s lock is untouched');
cmp_ok($redis->cli('PTTL', 'other'), '>', 0, 'and keeps its TTL');
$sa->quit;

# --- SIGKILL: nothing runs, the TTL ends the locks
my $ttl_ms = 2000;
my $sb = $node->background_psql('postgres', on_error_stop => 0, timeout => 30);
my $sc = $node->background_psql('postgres', on_error_stop => 0, timeout => 30);
my ($pid_b) = session_query($sb, 'SELECT pg_backend_pid()');
my $t_acquire = [gettimeofday];
($out) = session_query($sb, "SELECT redis_lock_acquire_session('s1', $ttl_ms)");
is($out, 't', 'backend B takes a session lock with a short TTL');
($out) = session_query($sc, "SELECT redis_lock_acquire_session('s2', $ttl_ms)");
is($out, 't', 'backend C takes another');

kill 'KILL', $pid_b;

SKIP:
{
	# Too slow a machine would let the TTL run out before we look.
	skip 'the TTL ran out before the check', 2
	  if tv_interval($t_acquire) > $ttl_ms / 1000 - 0.5;
	is($redis->cli('EXISTS', 's1'), '1',
		'the killed backend\'s lock outlives it');
	is($redis->cli('EXISTS', 's2'), '1',
		'the lock of the backend the postmaster ended outlives it too');
}
usleep(300_000);
SKIP:
{
	skip 'the TTL ran out before the check', 1
	  if tv_interval($t_acquire) > $ttl_ms / 1000 - 0.3;
	is($redis->cli('EXISTS', 's1', 's2'), '2',
		'nothing deletes them after the crash either');
}

$gone = wait_keys_gone($redis, $ttl_ms / 1000 + 5, 's1', 's2');
ok(defined $gone, 'the locks disappear once their TTL has run out');
my $lifetime = tv_interval($t_acquire);
cmp_ok($lifetime, '>=', $ttl_ms / 1000 - 0.1,
	'not before the TTL');
cmp_ok($lifetime, '<', $ttl_ms / 1000 + 3, 'and soon after it');
is($redis->cli('GET', 'other'), 'someone',
	'the other client\'s lock is still untouched');

# The postmaster restarted after the crash; a new backend can take the lock.
ok($node->poll_query_until('postgres', 'SELECT true'),
	'server accepts connections after the crash');
is( $node->safe_psql(
		'postgres',
		"SELECT redis_lock_acquire_session('s1', 30000), redis_lock_release('s1')"),
	't|t',
	'a new backend takes and releases the expired lock');
is($redis->cli('GET', 'stk'), '5', 'stock unchanged by the crash');

$sb->quit;
$sc->quit;
$node->stop;
$redis->stop;

done_testing();
