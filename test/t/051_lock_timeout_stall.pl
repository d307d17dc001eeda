# lock_timeout bounds the whole wait for a Redis lock, round trips
# included: when Redis stalls in the middle of a wait (SIGSTOP: it takes the
# bytes and answers nothing), the waiter fails with 55P03 about lock_timeout
# after the wait began, not one command_timeout later, the abort that
# follows included; and the same when the stall starts before the wait.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use RedisLockTest qw(session_query start_query finish_query);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('stall', $redis);

is($redis->cli('SET', 'hot', 'someone', 'NX', 'PX', '60000'), 'OK',
	'another client holds key "hot"');

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
session_query($s, 'SET redislock.command_timeout = 3000');
session_query($s, "SELECT redis_stock_get('warm')");
my ($out, $err, $secs);

# Redis stalls 300 ms into a wait bounded by lock_timeout = 800.
session_query($s, 'SET lock_timeout = 800');
my $t0 = [gettimeofday];
start_query($s, "SELECT redis_lock_acquire('hot', 30000, -1)");
usleep(300_000);
$redis->pause;
($out, $err) = finish_query($s, 30);
$secs = tv_interval($t0);
$redis->resume;
like($err, qr/ERROR:\s+55P03: canceling statement due to lock timeout/,
	'a stall mid-wait ends with 55P03');
cmp_ok($secs, '<', 1.6, 'about lock_timeout after the wait began, abort included');
diag("stalled mid-wait: ${secs}s");

# The stall came before the wait: the first attempt gets no answer either.
$redis->pause;
($out, $err, $secs) = session_query($s, "SELECT redis_lock_acquire('hot', 30000, -1)");
$redis->resume;
like($err, qr/ERROR:\s+55P03: canceling statement due to lock timeout/,
	'a stall from the start ends with 55P03');
cmp_ok($secs, '<', 1.6, 'about lock_timeout after the wait began, abort included');
diag("stalled from the start: ${secs}s");

# Nothing was left behind, and the session goes on.
($out, $err) = session_query($s, 'RESET lock_timeout; SELECT redis_lock_acquire_session(\'free\', 30000)');
is("$out$err", 't', 'the session takes another lock afterwards');
is($redis->cli('GET', 'hot'), 'someone', 'the holder still holds "hot"');

$s->quit;
$node->stop;
$redis->stop;
done_testing();
