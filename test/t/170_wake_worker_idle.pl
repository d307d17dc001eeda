# With redislock preloaded, the subscription connections that a database's
# worker opened for its waiters are closed once no wait has needed them for
# a few seconds, also while the worker stays to renew leases; and those of
# a server's connection entry that a change of the server replaced are
# closed too.  None stays open for as long as the worker runs.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query wait_until works);
use WakeTest qw(new_session waits start_timed_wait granted_after);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('wake_worker_idle', $redis,
	conf => "shared_preload_libraries = 'redislock'\n"
	  . "redislock.recover_interval = 0");

# The Redis clients whose last command was a subscription's: the worker's
# subscription connections, subscribed or not
sub subscription_connections
{
	return scalar grep { /\bcmd=s?(?:un)?subscribe\b/ }
	  split /\n/, $redis->cli('CLIENT', 'LIST');
}

# The database's worker
sub worker_pid
{
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'redislock worker' AND datname = 'postgres'"
	);
}

# A session keeps a lock whose lease the worker renews, so that it stays
my $keeper = new_session($node);
works($keeper, "SELECT redis_lock_acquire_session('keep', 3000)", 't',
	'a session holds a lock that the worker renews');
ok(defined wait_until(15, sub { worker_pid() ne '' }), 'the database has a worker');
my $worker = worker_pid();

# A wait through the worker for a key of another client, which that client
# then deletes; within $limit seconds, the worker listens for it on one
# subscription connection
sub wait_through_worker
{
	my ($waiter, $key, $limit) = @_;
	$redis->cli('SET', $key, 'someone', 'PX', '30000');
	start_timed_wait($waiter, $key, 'redis_lock_acquire');
	waits($node, $waiter);
	ok(defined wait_until($limit, sub { subscription_connections() == 1 }),
		"the worker listens for the waiter of $key on one connection");
	$redis->cli('DEL', $key);
	my ($granted) = granted_after($waiter, 0);
	is($granted, 't', "the waiter of $key gets the lock");
	return;
}

my $waiter = new_session($node);
wait_through_worker($waiter, 'idle', 10);
my $closed = wait_until(20, sub { subscription_connections() == 0 });
ok(defined $closed, 'its subscription connection is closed once no wait needs it');
diag sprintf('closed %.1f s after the wait ended', $closed // -1);
is(worker_pid(), $worker, 'while the worker stays, renewing');

# A server changed just after a wait: the connection that served it, of
# the server's old entry, is closed at the next wait, which opens another
wait_through_worker($waiter, 'again', 10);
$node->safe_psql('postgres',
	"ALTER SERVER redislock OPTIONS (ADD replica_timeout '2000')");
wait_through_worker($waiter, 'changed', 2);
ok(defined wait_until(20, sub { subscription_connections() == 0 }),
	'after a change of the server, no subscription connection stays');
is(worker_pid(), $worker, 'the same worker still runs');

$waiter->quit;
$keeper->quit;
$node->stop;
$redis->stop;

done_testing();
