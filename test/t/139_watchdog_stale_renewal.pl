# A renewal that the lease watchdog sent for one hold of a lock, and that
# reaches Redis only after the backend released the lock and took it again
# with a shorter ttl, carries the same owner token: it must not stretch
# the new hold's lease to the old ttl.  A proxy holds the watchdog's
# renewal back on its way to Redis while the backend does that.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use DelayProxy;
use RedisLockTest qw(session_query wait_until works);
use WakeTest qw(add_server new_session);

my $redis = RedisLockTest->start_redis();
# Redis learns the extend script at its first use, from the watchdog's
# renewal: the proxy holds that request back for 1.5 s
my $proxy = DelayProxy->start($redis->port, 0,
	hold_requests => [ qr/PEXPIRE', KEYS\[1\]/, 1.5 ]);
my $node = RedisLockTest->new_node('watchdog_stale', $redis,
	conf => "shared_preload_libraries = 'redislock'\n"
	  . "redislock.recover_interval = 0\n"
	  . "redislock.command_timeout = 5000");
add_server($node, 'held', $proxy->port);

# The EVALSHA calls that Redis refused, as it refuses a script it does not
# know yet (NOSCRIPT)
sub refused_evalsha
{
	my ($failed) = $redis->cli('INFO', 'commandstats') =~
	  /^cmdstat_evalsha:.*\bfailed_calls=(\d+)/m;
	return $failed // 0;
}

my $holder = new_session($node, 'held');
works($holder, "SELECT redis_lock_acquire_session('k', 6000)", 't',
	'a session takes a lock with a lease of 6 s');
my $refused = refused_evalsha();
# its first renewal is due 2 s later: Redis refuses the EVALSHA, and the
# proxy holds back what follows, which loads and runs the script
ok(defined wait_until(10, sub { refused_evalsha() > $refused }),
	'the watchdog sends its renewal');
my $retaken = time;
works($holder,
	"SELECT redis_lock_release('k'); SET redislock.lease_renewal = off; "
	  . "SELECT redis_lock_acquire_session('k', 3000)",
	"t\nt", 'the session releases the lock and takes it again, for 3 s');
cmp_ok(time - $retaken, '<', 1, 'while the renewal is still on its way');

# the renewal reaches Redis 1.5 s after it was sent
RedisLockTest::sleep_for(2);
my $pttl = $redis->cli('PTTL', 'k');
diag "PTTL $pttl ms, " . sprintf('%.1f s after the lock was taken again', time - $retaken);
cmp_ok($pttl, '>', 0, 'the second hold still has the lock');
cmp_ok($pttl, '<=', 3000, 'with no more than its own lease');

works($holder, "SELECT redis_lock_release('k')", 't', 'and releases it');
$holder->quit;
$node->stop;
$redis->stop;

done_testing();
