# A connection the Redis side has closed while it was idle (Redis' client
# timeout, CLIENT KILL, a Redis restart between transactions) is noticed
# before anything is sent on it and reopened without a message: the next
# call and the next COMMIT succeed, with verify_before_commit on or off,
# and the lock is released at commit.  If Redis is down when the reconnect
# is tried, the error is the connect error (08001), not "outcome unknown".
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query wait_until);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('stale', $redis);
my $port = $redis->port;

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
session_query($s,
	'SET redislock.connect_timeout = 500; SET redislock.command_timeout = 1000');
my ($out, $err);

# Wait until Redis has no client left but the asking redis-cli.
sub all_closed
{
	return defined wait_until(10, sub { $redis->client_count == 0 });
}

# Take transaction lock $key, let $close close the connection, then COMMIT:
# it must succeed without a message and release the lock.
sub commit_after
{
	my ($key, $how, $close) = @_;
	session_query($s, 'BEGIN');
	($out) = session_query($s, "SELECT redis_lock_acquire('$key', 30000)");
	is($out, 't', "$how: transaction lock taken");
	$close->();
	($out, $err) = session_query($s, 'COMMIT');
	is($err, '', "$how: COMMIT succeeds without a message");
	is($redis->cli('EXISTS', $key), '0', "$how: and releases the lock");
	return;
}

is($redis->cli('SET', 'st', '5'), 'OK', 'stock "st" is 5');

# --- Redis' idle timeout
is($redis->cli('CONFIG', 'SET', 'timeout', '1'), 'OK', 'Redis closes clients idle for 1 s');
($out) = session_query($s, "SELECT redis_stock_get('st')");
is($out, '5', 'the session reads the stock');
ok(all_closed(), 'Redis closed the idle connection');
($out, $err) = session_query($s, "SELECT redis_stock_get('st')");
is($out, '5', 'the next call succeeds');
is($err, '', 'without any message');

commit_after('t1', 'idle timeout, verify on', \&all_closed);
session_query($s, 'SET redislock.verify_before_commit = off');
commit_after('t2', 'idle timeout, verify off', \&all_closed);
session_query($s, 'RESET redislock.verify_before_commit');
$redis->cli('CONFIG', 'SET', 'timeout', '0');

# --- CLIENT KILL
my $kill = sub {
	cmp_ok($redis->cli('CLIENT', 'KILL', 'TYPE', 'normal'), '>=', 1,
		'CLIENT KILL closes the session\'s connection');
};
($out) = session_query($s, "SELECT redis_stock_get('st')");
$kill->();
($out, $err) = session_query($s, "SELECT redis_stock_get('st')");
is($out, '5', 'the next call after CLIENT KILL succeeds');
is($err, '', 'without any message');
commit_after('k1', 'CLIENT KILL, verify on', $kill);

# --- a Redis restart between transactions
$redis->restart;
($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('r1', 30000)");
is($out, 't', 'the first call after a Redis restart succeeds');
is($err, '', 'without any message');
($out) = session_query($s, "SELECT redis_lock_release('r1')");
is($out, 't', 'and the lock is released');

# --- Redis down when the reconnect is tried
$redis->stop;
($out, $err) = session_query($s, "SELECT redis_lock_acquire('d1', 30000)");
like($err, qr/ERROR:\s+08001: could not connect to Redis server "redislock"\nDETAIL:  Connection to 127\.0\.0\.1:$port failed/,
	'with Redis down, the failed reconnect gives the connect error');
unlike($err, qr/08006/, 'not "outcome unknown"');
$redis->restart;
($out, $err) = session_query($s, "SELECT redis_lock_acquire('d1', 30000)");
is($out, 't', 'the session works once Redis is back');

$s->quit;
$node->stop;
$redis->stop;

done_testing();
