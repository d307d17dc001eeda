# A slow Redis (DEBUG SLEEP): a call fails once redislock.command_timeout
# has passed, with an error saying so, instead of hanging; transaction end
# (which cannot be cancelled) is bounded by the same timeout and only warns;
# the backend stays usable and works again once Redis answers.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('slow', $redis);
my $port = $redis->port;
my $endpoint = qr/127\.0\.0\.1:$port/;

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 30);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
session_query($s, 'SET redislock.command_timeout = 300');
my ($pid) = session_query($s, 'SELECT pg_backend_pid()');
my ($out, $err, $secs);

($out) = session_query($s, "SELECT redis_lock_acquire_session('warm', 30000)");
is($out, 't', 'lock taken while Redis is responsive');

# --- a call while Redis sleeps
my $h = $redis->debug_sleep(3);
($out, $err, $secs) = session_query($s, "SELECT redis_lock_acquire_session('slow1', 30000)");
like($err,
	qr/ERROR:\s+08006: Redis server "redislock" did not answer within 300 ms\nDETAIL:  The command went to $endpoint; its outcome is unknown/,
	'acquire fails with 08006 once command_timeout has passed, naming the server and, in the detail, the endpoint');
cmp_ok($secs, '>=', 0.28, 'not before command_timeout');
cmp_ok($secs, '<', 1.5, 'and soon after it');

($out, $err, $secs) = session_query($s, 'SELECT pg_backend_pid(), 1 + 1');
is($out, "$pid|2", 'the same backend is usable while Redis sleeps');

($out, $err, $secs) = session_query($s, "SELECT redis_stock_get('st')");
like($err, qr/ERROR:\s+08006: .*did not answer within 300 ms/,
	'another call fails the same way');
cmp_ok($secs, '<', 1.5, 'in time as well');
$redis->wake($h);

# The timed-out acquire may have been run by Redis after all (its outcome
# was unknown); taking the lock again must work either way.
($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('slow1', 30000)");
is($out, 't', 'the lock is taken once Redis is responsive again');
like($redis->cli('GET', 'slow1'), qr/^pg:.*:$pid:/, 'and it is ours');
($out, $err) = session_query($s, "SELECT redis_lock_release('slow1')");
is($out, 't', 'and released');

# --- COMMIT while Redis sleeps: the check fails in time, the abort warns
session_query($s, 'BEGIN');
($out) = session_query($s, "SELECT redis_lock_acquire('slow2', 30000)");
is($out, 't', 'transaction lock taken');
$h = $redis->debug_sleep(2);
($out, $err, $secs) = session_query($s, 'COMMIT');
like($err, qr/ERROR:\s+08006: .*did not answer within 300 ms/,
	'COMMIT fails when the lock cannot be verified in time');
cmp_ok($secs, '<', 2, 'COMMIT returns within a few command timeouts');
($out, $err) = session_query($s, 'SELECT 1');
is($out, '1', 'session is usable after the failed COMMIT');
is($err, '', 'and out of the transaction');

# --- ROLLBACK while Redis sleeps: bounded, only a warning
session_query($s, 'SET redislock.verify_before_commit = off');
$redis->wake($h);
session_query($s, 'BEGIN');
($out) = session_query($s, "SELECT redis_lock_acquire('slow3', 30000)");
is($out, 't', 'transaction lock taken');
$h = $redis->debug_sleep(2);
($out, $err, $secs) = session_query($s, 'ROLLBACK');
unlike($err, qr/ERROR/, 'ROLLBACK does not fail while Redis sleeps');
like($err, qr/WARNING:\s+08006: .*did not answer within 300 ms/,
	'ROLLBACK warns that the release timed out');
cmp_ok($secs, '<', 1.5, 'ROLLBACK returns within the command timeout');

# --- COMMIT without the check: also bounded, only a warning
$redis->wake($h);
session_query($s, 'BEGIN');
($out) = session_query($s, "SELECT redis_lock_acquire('slow4', 30000)");
is($out, 't', 'transaction lock taken');
$h = $redis->debug_sleep(2);
($out, $err, $secs) = session_query($s, 'COMMIT');
unlike($err, qr/ERROR/, 'COMMIT without the check succeeds while Redis sleeps');
like($err, qr/WARNING:\s+08006: .*did not answer within 300 ms/,
	'and warns that the release timed out');
cmp_ok($secs, '<', 1.5, 'within the command timeout');
$redis->wake($h);

# --- everything works again once Redis is responsive
($out, $err) = session_query($s, "SELECT redis_lock_acquire('slow5', 30000)");
is($out, 't', 'the session works once Redis answers again');
is($err, '', 'without any message');
is($redis->cli('EXISTS', 'slow5'), '0', 'and its lock was released at commit');

$s->quit;
$node->stop;
$redis->stop;

done_testing();
