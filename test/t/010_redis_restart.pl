# Redis killed and restarted under a live session: the next call fails
# quickly with an error naming the endpoint, the backend stays usable, and
# the same session reconnects once Redis is back.  A transaction holding a
# lock when Redis dies must not commit silently (verify_before_commit), and
# with the check turned off its commit succeeds with a warning about the
# release.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval);
use RedisLockTest qw(session_query);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('restart', $redis);
my $port = $redis->port;
my $endpoint = qr/127\.0\.0\.1:$port/;

$node->safe_psql('postgres', 'CREATE TABLE audit (x int)');

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 30);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
session_query($s,
	'SET redislock.connect_timeout = 500; SET redislock.command_timeout = 500;'
);
my ($pid) = session_query($s, 'SELECT pg_backend_pid()');

my ($out, $err, $secs);

($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('r1', 30000)");
is($out, 't', 'session lock taken while Redis runs');
is($err, '', 'no message while Redis runs');
like($redis->cli('GET', 'r1'), qr/^pg:.*:$pid:[0-9]+:[0-9a-f]{32}$/,
	'the lock carries the backend token');

# --- Redis crashes under an open connection.
$redis->kill9;

($out, $err, $secs) =
  session_query($s, "SELECT redis_lock_acquire_session('r2', 30000)");
like($err, qr/ERROR:\s+08001: could not connect to Redis server "redislock"\nDETAIL:  Connection to $endpoint failed/,
	'the dead connection is noticed before sending, and the reconnect fails with 08001');
cmp_ok($secs, '<', 2.5,
	'lost connection reported within connect_timeout + command_timeout');

is((session_query($s, 'SELECT 1'))[0], '1', 'backend usable after the lost connection');

($out, $err, $secs) =
  session_query($s, "SELECT redis_lock_acquire_session('r2', 30000)");
like(
	$err,
	qr/ERROR:\s+08001: could not connect to Redis server "redislock"\nDETAIL:  Connection to $endpoint failed/,
	'next call fails to connect with 08001 naming the endpoint');
cmp_ok($secs, '<', 2.5, 'connect failure reported within connect_timeout');
($out, $err) = session_query($s, "SELECT redis_stock_get('st')");
like($err, qr/ERROR:\s+08001: could not connect to Redis server "redislock"\nDETAIL:  Connection to $endpoint failed/,
	'stock functions report the same connect failure');

($out, $err) = session_query($s, 'SELECT pg_backend_pid(), 1 + 1');
is($out, "$pid|2", 'same backend still usable after the errors');

# --- Redis comes back: the same session reconnects on its next call.
$redis->restart;

($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('r3', 30000)");
is($out, 't', 'same session takes a lock after Redis restarted');
is($err, '', 'without any message');
like($redis->cli('GET', 'r3'), qr/^pg:.*:$pid:[0-9]+:[0-9a-f]{32}$/,
	'the lock is in the restarted Redis with the same backend token');

# r1 was taken before the crash: Redis lost it, so renewing it must say so
# instead of pretending the lease was kept.
($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('r1', 30000)");
like($err, qr/ERROR:\s+55P03: lease of Redis lock "r1".* was lost/,
	'a lock lost in the crash is reported as lost, not silently re-taken');

($out, $err) = session_query($s, 'SELECT redis_lock_release_all()');
is($out, '1', 'release_all releases the lock taken after the restart');
like($err, qr/WARNING:.*lease of Redis lock "r1" .*was lost/,
	'and warns about the lock lost in the crash');
is($redis->cli('EXISTS', 'r3'), '0', 'released lock is gone from Redis');

# --- A transaction holding a lock when Redis dies must not commit.
session_query($s, 'BEGIN');
($out) = session_query($s, "SELECT redis_lock_acquire('c1', 30000)");
is($out, 't', 'transaction lock taken');
session_query($s, 'INSERT INTO audit VALUES (1)');
$redis->kill9;

($out, $err, $secs) = session_query($s, 'COMMIT');
like($err, qr/ERROR:\s+08001: could not connect to Redis server "redislock"\nDETAIL:  Connection to $endpoint failed/,
	'COMMIT fails when the lock cannot be verified');
cmp_ok($secs, '<', 3, 'failed COMMIT returns within the timeouts');
($out, $err) = session_query($s, 'SELECT count(*) FROM audit');
is($out, '0', 'the failed COMMIT rolled the transaction back');
is($err, '', 'session is out of the failed transaction');

# --- With the check off the commit goes through, warning about the release.
$redis->restart;
session_query($s, 'SET redislock.verify_before_commit = off');
session_query($s, 'BEGIN');
($out) = session_query($s, "SELECT redis_lock_acquire('c2', 30000)");
is($out, 't', 'transaction lock taken with verify_before_commit off');
session_query($s, 'INSERT INTO audit VALUES (2)');
$redis->kill9;

($out, $err, $secs) = session_query($s, 'COMMIT');
unlike($err, qr/ERROR/, 'COMMIT does not fail with verify_before_commit off');
like($err, qr/WARNING:\s+08001: could not connect to Redis server "redislock"\nDETAIL:  Connection to $endpoint failed/,
	'COMMIT warns that the lock could not be released');
cmp_ok($secs, '<', 2.5, 'COMMIT with a dead Redis returns within the timeouts');
($out, $err) = session_query($s, 'SELECT count(*) FROM audit');
is($out, '1', 'the transaction committed');
is((session_query($s, 'SELECT count(*) FROM redis_locks()'))[0],
	'0', 'the backend no longer counts the lock as held');

$redis->restart;
($out, $err) = session_query($s, "SELECT redis_lock_acquire('c2', 30000)");
is($out, 't', 'the session works again after the second restart');

$s->quit;
$node->stop;
$redis->stop;

done_testing();
