# At transaction end, with redislock preloaded, the locks whose holds end
# stop counting as held as soon as their release is sent, not when the
# whole release batch has come back.  A transaction holds a lock on a fast
# server and one on a server whose replies come 2 s late: its commit takes
# those 2 s, yet the local waiter for the fast lock is granted at once,
# and the lease watchdog, which renews the fast lock every half second,
# does not take the key that the release deleted for a lease lost.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use DelayProxy;
use RedisLockTest qw(session_query start_query);
use WakeTest qw(add_server new_session waits granted_after);

my $redis = RedisLockTest->start_redis();
# the replies on the slow server's connections come 2 s late
my $proxy = DelayProxy->start($redis->port, 2);
my $node = RedisLockTest->new_node('release_at_xact_end', $redis,
	conf => "shared_preload_libraries = 'redislock'\n"
	  . "redislock.recover_interval = 0");
add_server($node, 'slow', $proxy->port);

my $holder = new_session($node);
my $waiter = new_session($node);
session_query($holder,
	'SET redislock.command_timeout = 10000; SET redislock.verify_before_commit = off');
# Redis learns the release script, so that the commit's releases go out in
# one round
my ($out, $err) = session_query($holder,
	"SELECT redis_lock_acquire_session('warm', 30000) AND redis_lock_release('warm')");
is("$out$err", 't', 'a lock is taken and released');

# the fast lock's lease of 1.5 s is renewed every 0.5 s
($out, $err) = session_query($holder,
	"BEGIN; SELECT redis_lock_acquire('fast', 1500); "
	  . "SET LOCAL redislock.server = slow; SELECT redis_lock_acquire('slow', 30000)");
is("$out$err", "t\nt", 'a transaction takes a lock on each server');
start_query($waiter,
	"SELECT redis_lock_acquire_session('fast', 30000, 10000) AND true, "
	  . "extract(epoch FROM clock_timestamp())");
ok(defined waits($node, $waiter), 'a local backend waits for the fast lock');

my $log_offset = -s $node->logfile;
my $committed = time;
($out, $err) = session_query($holder, 'COMMIT');
my $commit_secs = time - $committed;
is($err, '', 'the transaction commits');
cmp_ok($commit_secs, '>=', 1.8, 'its release batch waits for the slow server');

my ($granted, $secs) = granted_after($waiter, $committed);
is($granted, 't', 'the local waiter gets the fast lock');
diag sprintf('granted %.0f ms after COMMIT started, which took %.0f ms',
	1000 * $secs, 1000 * $commit_secs);
cmp_ok($secs, '<', 1, 'before the release batch has come back');

is( $node->safe_psql('postgres',
		"SELECT leases_lost FROM redis_stats() WHERE server = 'redislock'"),
	'0', 'no lease counted lost');
unlike(slurp_file($node->logfile, $log_offset), qr/was lost/,
	'and none logged lost');

session_query($waiter, "SELECT redis_lock_release('fast')");
$waiter->quit;
$holder->quit;
$node->stop;
$redis->stop;

done_testing();
