# Redis is the truth for waiters: when another client deletes the key of a
# lock that a local backend holds (an operator's DEL, a forced unlock), the
# local waiters do not wait for that holder's release.  The first of them
# is granted within the poll bound, with keyspace events off and on, with
# redislock preloaded and without (with the preload and keyspace events,
# at once); with the preload the next local waiter then waits in Redis
# behind the new holder, and is granted when that one's key is deleted
# too; the holder whose key was deleted finds its lease lost at commit.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RedisLockTest qw(session_query start_query);
use WakeTest qw(add_server new_session waits granted_after);

my $redis = RedisLockTest->start_redis();
my $preloaded = RedisLockTest->new_node('deleted_preloaded', $redis,
	conf => "shared_preload_libraries = 'redislock'\n"
	  . "redislock.recover_interval = 0");
my $plain = RedisLockTest->new_node('deleted_plain', $redis);

# Start a wait of the session for $key, for a session hold, of up to 5 s
sub start_wait
{
	my ($session, $key) = @_;
	start_query($session,
		"SELECT redis_lock_acquire_session('$key', 30000, 5000) AND true, "
		  . "extract(epoch FROM clock_timestamp())");
	return;
}

# Another client deletes $key while $waiter waits for it: the waiter must
# be granted well before its wait of 5 s ends, and within $limit seconds
sub granted_at_delete
{
	my ($waiter, $key, $what, $limit) = @_;
	usleep(300_000);			# past a first poll of a wait
	my $deleted = time;
	is($redis->cli('DEL', $key), '1', "$what: another client deletes the key");
	my ($granted, $secs) = granted_after($waiter, $deleted);
	is($granted, 't', "$what: the waiter gets the lock");
	diag sprintf('%s: granted %.0f ms after the DEL', $what, 1000 * $secs);
	cmp_ok($secs, '<', $limit, "$what: within $limit s");
	return;
}

# A local holder of $key in a transaction, $n local waiters behind it,
# and a foreign DEL for each: the first waiter gets the lock at the first,
# the second (with the preload, whose local queue keeps their order) at
# the second, each within $limit seconds; the holder finds its lease lost
# at commit
sub deleted_under_holders
{
	my ($node, $server, $key, $n, $what, $limit) = @_;
	my $holder = new_session($node, $server);
	my @waiters = map { new_session($node, $server) } 1 .. $n;
	my @nth = ('first', 'second');

	my ($out, $err) = session_query($holder,
		"BEGIN; SELECT redis_lock_acquire('$key', 30000)");
	is("$out$err", 't', "$what: a local backend takes the lock");
	for my $w (@waiters)
	{
		start_wait($w, $key);
		ok(defined waits($node, $w), "$what: a local backend waits behind it");
	}
	granted_at_delete($waiters[$_], $key, "$what, $nth[$_] waiter", $limit)
	  for 0 .. $n - 1;
	($out, $err) = session_query($holder, 'COMMIT');
	like($err, qr/40001/, "$what: the first holder finds its lease lost at commit");
	for my $w (@waiters)
	{
		session_query($w, "SELECT redis_lock_release_all()");
		$w->quit;
	}
	$holder->quit;
	return;
}

# without keyspace events, the first in line finds the DEL by polling
deleted_under_holders($preloaded, undef, 'off1', 2,
	'preloaded, keyspace events off', 2);
deleted_under_holders($plain, undef, 'off2', 1,
	'without the preload, keyspace events off', 2);

# Servers made after Redis publishes keyspace events, whose subscription
# connections learn it
is($redis->cli('CONFIG', 'SET', 'notify-keyspace-events', 'Kgx'), 'OK',
	'keyspace events for generic commands and expiries');
add_server($_, 'events', $redis->port) for $preloaded, $plain;
# With the preload, the worker that listens for the first in line knows
# that the local holder did not release: the DEL wakes the waiter.  Without
# it, a DEL of a key that a backend holds is taken for that backend's
# release, which wakes one waiter only, and the waiter finds the DEL at its
# next poll, a second later at most.
deleted_under_holders($preloaded, 'events', 'on1', 2,
	'preloaded, keyspace events on', 0.5);
deleted_under_holders($plain, 'events', 'on2', 1,
	'without the preload, keyspace events on', 2);

$preloaded->stop;
$plain->stop;
$redis->stop;

done_testing();
