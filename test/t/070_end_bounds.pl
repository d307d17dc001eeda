# A transaction end is bounded as a whole while Redis is stalled: a
# ROLLBACK through five savepoint levels, each holding a lock, takes one
# command_timeout, not one per level, and only warns; PostgreSQL's own
# locks held by that transaction (a row lock here) are free as soon as it
# returns; pg_terminate_backend ends a backend stuck in such a ROLLBACK at
# once; a COMMIT whose check fails and the abort that follows take two
# command timeouts at most.  redislock.end_timeout_limit, a superuser
# setting, caps every end whatever command_timeout a user chose.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use RedisLockTest qw(session_query start_query finish_query wait_until backend_gone);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('ends', $redis);
$node->safe_psql(
	'postgres', q{
	CREATE TABLE item (id int PRIMARY KEY);
	INSERT INTO item VALUES (1);
	CREATE ROLE app LOGIN;
	GRANT SELECT, UPDATE ON item TO app;
});

my $admin = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$admin->set_query_timer_restart;
session_query($admin, '\set VERBOSITY verbose');

# A new session (as $user, if given) with verbose errors and
# command_timeout 1000 ms; returns it and its pid.
sub new_session
{
	my ($user) = @_;
	my $s = $node->background_psql(
		'postgres',
		on_error_stop => 0,
		timeout       => 60,
		extra_params  => $user ? [ '-U', $user ] : []);
	$s->set_query_timer_restart;
	session_query($s, '\set VERBOSITY verbose');
	session_query($s, 'SET redislock.command_timeout = 1000');
	my ($pid) = session_query($s, 'SELECT pg_backend_pid()');
	return ($s, $pid);
}

# In session $s: begin, lock row 1 of item, then open five nested
# savepoints, each taking a Redis lock; returns how many were taken.
sub five_levels
{
	my ($s, $prefix) = @_;
	session_query($s, 'BEGIN');
	session_query($s, 'SELECT id FROM item WHERE id = 1 FOR UPDATE');
	my $taken = 0;
	foreach my $level (1 .. 5)
	{
		session_query($s, "SAVEPOINT sp$level");
		my ($out) = session_query($s, "SELECT redis_lock_acquire('$prefix$level', 30000)");
		$taken++ if $out eq 't';
	}
	return $taken;
}

# Start, in session $s, a wait for row 1 of item, and return once
# pg_stat_activity shows it waiting for a PostgreSQL lock.
sub wait_for_row
{
	my ($s, $pid) = @_;
	start_query($s, 'SELECT id FROM item WHERE id = 1 FOR UPDATE');
	my $waiting = wait_until(
		10,
		sub {
			(session_query($admin,
				"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $pid"))[0] eq 'Lock';
		});
	return defined $waiting;
}

my ($out, $err, $secs);

# --- ROLLBACK through five savepoint levels while Redis is stopped
my ($s, $pid) = new_session();
my ($waiter, $waiter_pid) = new_session();
is(five_levels($s, 'lvl'), 5, 'five savepoint levels each hold a Redis lock');
ok(wait_for_row($waiter, $waiter_pid), 'a second session waits for the row lock');

$redis->pause;
my $t0 = [gettimeofday];
start_query($s, 'ROLLBACK');
($out, $err, $secs) = finish_query($s, 30);
$secs = tv_interval($t0);
cmp_ok($secs, '<', 2, 'ROLLBACK of five levels returns within 2 x command_timeout');
unlike($err, qr/ERROR/, 'ROLLBACK raises no error');
like($err, qr/WARNING:\s+08006: /, 'and warns about the release');
($out, $err) = finish_query($waiter, 30);
is($out, '1', 'the waiting session gets the row');
cmp_ok(tv_interval($t0), '<', 2, 'within the same bound');
$redis->resume;

($out, $err) = session_query($s, "SELECT redis_lock_acquire('after1', 30000)");
is($out, 't', 'the session takes a lock once Redis runs again');
is($err, '', 'without any message');
$redis->cli('FLUSHALL');

# --- pg_terminate_backend during such a ROLLBACK
is(five_levels($s, 'term'), 5, 'five levels hold locks again');
ok(wait_for_row($waiter, $waiter_pid), 'the second session waits for the row lock again');
$redis->pause;
start_query($s, 'ROLLBACK');
usleep(300_000);
is((session_query($admin,
	"SELECT state FROM pg_stat_activity WHERE pid = $pid"))[0],
	'active', 'the ROLLBACK is still running 0.3 s in');
($out) = session_query($admin, "SELECT pg_terminate_backend($pid)");
is($out, 't', 'terminate sent');
$t0 = [gettimeofday];
backend_gone($admin, $pid, 10);
$secs = tv_interval($t0);
cmp_ok($secs, '<', 1, 'the terminated backend is gone within 1 s');
($out, $err) = finish_query($waiter, 30);
is($out, '1', 'the waiting session gets the row');
cmp_ok(tv_interval($t0), '<', 1, 'within 1 s of the terminate');
$redis->resume;
eval { $s->quit };
$redis->cli('FLUSHALL');

# --- a COMMIT whose check fails, and the abort that follows: two bounds
($s, $pid) = new_session();
is(five_levels($s, 'cv'), 5, 'five levels hold locks in a new session');
$redis->pause;
($out, $err, $secs) = session_query($s, 'COMMIT');
like($err, qr/ERROR:\s+08006: /, 'COMMIT fails when the locks cannot be checked');
cmp_ok($secs, '<', 2.5, 'the check and the abort take at most 2 x command_timeout');
$redis->resume;
is((session_query($s, 'SELECT 1'))[0], '1', 'the session is usable');
$redis->cli('FLUSHALL');

# --- redislock.end_timeout_limit
session_query($admin, "LOAD 'redislock'");
($out) = session_query($admin,
	"SELECT setting, unit, context FROM pg_settings WHERE name = 'redislock.end_timeout_limit'");
is($out, '30000|ms|superuser', 'end_timeout_limit: 30 s by default, for superusers');
($out, $err) = session_query($admin,
	'ALTER SYSTEM SET redislock.end_timeout_limit = 500');
is($err, '', 'a superuser sets end_timeout_limit to 500 ms');
session_query($admin, 'SELECT pg_reload_conf()');

my ($app, $app_pid) = new_session('app');
($out) = session_query($app, "SELECT redis_lock_acquire_session('lim0', 30000)");
is($out, 't', 'an ordinary user takes a lock');
ok( defined wait_until(
		10,
		sub {
			(session_query($app, "SELECT current_setting('redislock.end_timeout_limit', true)"))[0]
			  eq '500ms';
		}),
	'the user\'s session sees the limit');
($out, $err) = session_query($app, 'SET redislock.end_timeout_limit = 100000');
like($err, qr/ERROR:\s+42501: /, 'an ordinary user cannot raise the limit');
session_query($app, 'SET redislock.command_timeout = 10000');
session_query($app, 'BEGIN');
($out) = session_query($app, "SELECT redis_lock_acquire('lim1', 30000)");
is($out, 't', 'the user holds a transaction lock');
$redis->pause;
($out, $err, $secs) = session_query($app, 'ROLLBACK');
cmp_ok($secs, '<', 1.5, 'ROLLBACK is bounded by the limit, not by command_timeout 10 s');
unlike($err, qr/ERROR/, 'and only warns');
$redis->resume;

$app->quit;
$admin->quit;
$node->stop;
$redis->stop;

done_testing();
