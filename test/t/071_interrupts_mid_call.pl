# Interrupts are serviced in the middle of a round trip to Redis: with
# Redis stopped (SIGSTOP: it accepts bytes but answers nothing),
# statement_timeout and query cancel end a call with 57014, lock_timeout an
# acquire with 55P03, and pg_terminate_backend ends the backend, all long
# before command_timeout; a backend receiving a signal every 300 ms still
# gives up at command_timeout (a signal must not restart the wait).  After
# each, the backend works again once Redis does, and reads its own replies.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use RedisLockTest
  qw(session_query start_query finish_query wait_for_stderr wait_until backend_gone);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('midcall', $redis);
my $port = $redis->port;
is($redis->cli('SET', 'st', '5'), 'OK', 'stock "st" is 5');

my $admin = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$admin->set_query_timer_restart;

# A new session with verbose errors and the given command_timeout, that
# has talked to Redis once; returns it and its pid.
sub new_session
{
	my ($command_timeout) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
	$s->set_query_timer_restart;
	session_query($s, '\set VERBOSITY verbose');
	session_query($s, "SET redislock.command_timeout = $command_timeout");
	my ($pid) = session_query($s, 'SELECT pg_backend_pid()');
	my ($out) = session_query($s, "SELECT redis_stock_get('st')");
	die "Redis is not reachable: $out" unless $out eq '5';
	return ($s, $pid);
}

# Wait until backend $pid is running a statement.
sub wait_active
{
	my ($pid) = @_;
	wait_until(
		10,
		sub {
			(session_query($admin, "SELECT state FROM pg_stat_activity WHERE pid = $pid"))[0]
			  eq 'active';
		}) // die "backend $pid never became active";
	return;
}

my ($out, $err, $secs, $t0);
my ($s, $pid) = new_session(2000);

# --- statement_timeout in the middle of a round trip
$redis->pause;
session_query($s, 'SET statement_timeout = 500');
($out, $err, $secs) = session_query($s, "SELECT redis_stock_get('st')");
like($err, qr/ERROR:\s+57014: canceling statement due to statement timeout/,
	'statement_timeout ends a call on a stalled Redis with 57014');
cmp_ok($secs, '>=', 0.45, 'not before statement_timeout');
cmp_ok($secs, '<', 1, 'within 0.5 s after it, long before command_timeout');
session_query($s, 'RESET statement_timeout');
$redis->resume;
($out, $err) = session_query($s, "SELECT redis_stock_get('st')");
is($out, '5', 'the next call works once Redis runs again');
is($err, '', 'without any message');

# --- query cancel in the middle of a round trip
$redis->pause;
start_query($s, "SELECT redis_stock_get('st')");
wait_active($pid);
usleep(200_000);
is((session_query($admin, "SELECT pg_cancel_backend($pid)"))[0], 't', 'cancel sent');
$t0 = [gettimeofday];
($out, $err) = finish_query($s, 30);
$secs = tv_interval($t0);
like($err, qr/ERROR:\s+57014: canceling statement due to user request/,
	'pg_cancel_backend ends a call on a stalled Redis with 57014');
cmp_ok($secs, '<', 0.5, 'within 0.5 s');
$redis->resume;
($out, $err) = session_query($s, "SELECT redis_stock_get('st')");
is($out, '5', 'the next call works once Redis runs again');

# --- lock_timeout in the middle of an acquire's round trip.  The error
# comes at once; the abort that follows may wait (within command_timeout)
# to settle the acquire whose outcome is unknown.
$redis->pause;
session_query($s, 'SET lock_timeout = 300');
start_query($s, "SELECT redis_lock_acquire('lt', 30000, -1)");
$secs = wait_for_stderr($s, qr/ERROR/, 10);
ok(defined $secs && $secs < 0.8, 'lock_timeout ends an acquire on a stalled Redis in time')
  or diag('error after ' . ($secs // 'more than 10') . ' s');
($out, $err) = finish_query($s, 30);
like($err, qr/ERROR:\s+55P03: /, 'with 55P03');
cmp_ok(tv_interval($s->{rl_started}), '<', 3.5,
	'and the statement ends within lock_timeout and one end bound');
session_query($s, 'RESET lock_timeout');
$redis->resume;
($out, $err) = session_query($s, "SELECT redis_stock_get('st')");
is($out, '5', 'the next call works once Redis runs again');

# --- a signal every 300 ms does not extend command_timeout (one that asks
# the backend to log its memory contexts; PostgreSQL 13, which has no such
# request, signals every backend to reload its configuration)
my ($s2, $pid2) = new_session(1000);
my $signal = $node->safe_psql('postgres', 'SHOW server_version_num') >= 140000
  ? "pg_log_backend_memory_contexts($pid2)" : 'pg_reload_conf()';
$redis->pause;
start_query($s2, "SELECT redis_stock_get('st')");
my $signals = 0;
# (Signals stop after 10 s, in case each one restarts the wait.)
until (defined($secs = wait_for_stderr($s2, qr/^end of query/m, 0.3)))
{
	last if tv_interval($s2->{rl_started}) > 10;
	$signals++
	  if (session_query($admin, "SELECT $signal"))[0] eq 't';
}
$secs //= wait_for_stderr($s2, qr/^end of query/m, 10);
($out, $err) = finish_query($s2, 10);
cmp_ok($signals, '>=', 3, 'the backend was signalled while it waited');
like($err, qr/ERROR:\s+08006: Redis server "redislock" did not answer within 1000 ms\nDETAIL:  The command went to 127\.0\.0\.1:$port;/,
	'the call ends with 08006 at command_timeout');
cmp_ok($secs, '<', 1.5, 'signals did not extend command_timeout');
$redis->resume;
($out, $err) = session_query($s2, "SELECT redis_stock_get('st')");
is($out, '5', 'the next call works once Redis runs again');
$s2->quit;

# --- pg_terminate_backend in the middle of a round trip
$redis->pause;
start_query($s, "SELECT redis_stock_get('st')");
wait_active($pid);
usleep(300_000);
is((session_query($admin, "SELECT pg_terminate_backend($pid)"))[0], 't', 'terminate sent');
$secs = backend_gone($admin, $pid, 10);
ok(defined $secs && $secs < 1, 'a backend terminated while it waits on Redis is gone within 1 s')
  or diag('it took ' . ($secs // 'more than 10') . ' s');
$redis->resume;
eval { $s->quit };

$admin->quit;
$node->stop;
$redis->stop;

done_testing();
