# With redislock preloaded, a backend waiting for a lock that a client
# outside its PostgreSQL server holds is woken through its database's
# worker: the worker listens, on one subscription connection per foreign
# server, to the wake channel of every waiting backend of the database (and
# to the key's keyspace channel when Redis publishes keyspace events), and
# stops listening to it when the wait ends.  Two PostgreSQL servers, A and
# B, share one Redis: sessions on A hold the locks that sessions on B wait
# for.  A release on A wakes the waiter on B at once; a waiter that gives up
# leaves its channel and wakes the next; a waiter whose worker is
# terminated still gets the lock, and the next wait uses the new worker; a
# waiter whose worker's connection closes is listened for on another; the
# first wait of a database without a worker asks for one; a key too long
# for the lock table is waited for as without the preload.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use RedisLockTest qw(session_query start_query finish_query wait_for_stderr
  wait_until);
use WakeTest qw(add_server new_session pid_of waits start_timed_wait
  release_at granted_after hand_off median);

my $redis = RedisLockTest->start_redis();
my $preload = "shared_preload_libraries = 'redislock'\n"
  . "redislock.recover_interval = 0";
my $node_a = RedisLockTest->new_node('wake_worker_a', $redis, conf => $preload);
my $node_b = RedisLockTest->new_node('wake_worker_b', $redis, conf => $preload);
my $port = $redis->port;

# A second server on B for the same Redis: its waiters queue in Redis, not
# behind B's own waiters for the same key on server redislock
add_server($node_b, 'twin', $port);

# The CLIENT LIST lines of the Redis clients subscribed to a channel
sub subscribed
{
	return grep { /\b(?:sub|ssub)=[1-9]/ } split /\n/, $redis->cli('CLIENT', 'LIST');
}

# How many sharded channels the Redis clients listen to, all together
sub sharded_channels
{
	my $n = 0;
	$n += $_ for map { /\bssub=(\d+)/ } split /\n/, $redis->cli('CLIENT', 'LIST');
	return $n;
}

# The waiters queued beside a lock key
sub queued
{
	my ($key) = @_;
	my $waiters = $redis->sibling('', 'waiters', $key);
	return defined $waiters ? $redis->cli('LLEN', $waiters) : 0;
}

# The pid of B's redislock worker of database postgres, or ''
sub worker_pid
{
	return $node_b->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'redislock worker' AND datname = 'postgres'"
	);
}

# A session of B holds a lock all along, so that B's worker renews it and
# runs for the whole test
my $keeper = new_session($node_b);
session_query($keeper, "SELECT redis_lock_acquire_session('keep', 3000)");
ok(defined wait_until(15, sub { worker_pid() ne '' }), 'B runs a worker for database postgres');

my $holder = new_session($node_a);

# --- five waiters of B, each for its own lock: one subscription connection
my @waiters = map { new_session($node_b) } 1 .. 5;
session_query($holder, "SELECT redis_lock_acquire_session('many$_')") for 1 .. 5;
for my $i (1 .. 5)
{
	start_query($waiters[ $i - 1 ], "SELECT redis_lock_acquire('many$i', 30000, 20000)");
	waits($node_b, $waiters[ $i - 1 ]);
}
wait_until(5, sub { sharded_channels() == 5 });
my @subs = subscribed();
is(scalar @subs, 1, 'five waiting backends of B: one subscribed Redis connection');
like($subs[0] // '', qr/\bssub=5\b/, 'listening to the five wake channels');
for my $i (1 .. 5)
{
	session_query($holder, "SELECT redis_lock_release('many$i')");
	my ($out, $err) = finish_query($waiters[ $i - 1 ], 10);
	is("$out$err", 't', "A released many$i: its waiter on B got it");
}
ok(defined wait_until(5, sub { sharded_channels() == 0 }),
	'the waits over, no wake channel is listened to');
$_->quit for @waiters;

# --- hand-off from a holder on A to a waiter on B
my $waiter = new_session($node_b);
my @ms;
for (1 .. 7)
{
	my ($granted, $ms) = hand_off($node_b, $holder, $waiter, 'hot');
	is($granted, 't', "hand-off $_ from A to B: the waiter got the lock");
	push @ms, $ms;
}
diag 'hand-off ms: ' . join(' ', map { sprintf '%.1f', $_ } @ms);
cmp_ok(median(@ms), '<', 10, 'a release on A wakes the waiter on B within 10 ms (median of 7)');
ok(defined wait_until(5, sub { sharded_channels() == 0 }),
	'the hand-offs over, the waiter\'s wake channel is no longer listened to');
$waiter->quit;

# --- a waiter cancelled: its channel is left, the waiter behind it woken
my $first = new_session($node_b);
my $second = new_session($node_b, 'twin');
session_query($holder, "SELECT redis_lock_acquire_session('cx')");
start_query($first, "SELECT redis_lock_acquire('cx', 30000, 20000)");
waits($node_b, $first);
ok(defined wait_until(5, sub { queued('cx') == 1 }), 'a waiter of B is queued');
start_timed_wait($second, 'cx', 'redis_lock_acquire');
waits($node_b, $second);
ok(defined wait_until(5, sub { queued('cx') == 2 }), 'a second one behind it');
ok(defined wait_until(5, sub { sharded_channels() == 2 }), 'both wake channels are listened to');
$node_b->safe_psql('postgres', 'SELECT pg_cancel_backend(' . pid_of($first) . ')');
ok(defined wait_for_stderr($first, qr/57014: canceling statement due to user request/, 5),
	'the first waiter is cancelled');
finish_query($first, 5);
ok(defined wait_until(5, sub { sharded_channels() == 1 }),
	'its wake channel is no longer listened to');
ok(defined wait_until(5, sub { queued('cx') == 1 }), 'and it left the queue');
my ($granted, $secs) = granted_after($second, release_at($holder, 'cx'));
is($granted, 't', 'the waiter behind it got the lock at the release');
cmp_ok($secs, '<', 0.2, 'within 0.2 s');
$_->quit for ($first, $second);

# --- a key longer than a lock table entry keeps: waited for all the same
$waiter = new_session($node_b);
my $long = 'L' x 300;
session_query($holder, "SELECT redis_lock_acquire_session('$long')");
start_timed_wait($waiter, $long, 'redis_lock_acquire');
waits($node_b, $waiter);
usleep(300_000);
($granted, $secs) = granted_after($waiter, release_at($holder, $long));
is($granted, 't', 'a waiter for a 300-byte key got the lock at the release');
cmp_ok($secs, '<', 0.2, 'within 0.2 s');
$waiter->quit;

# --- the worker terminated while a backend waits through it
$waiter = new_session($node_b);
session_query($holder, "SELECT redis_lock_acquire_session('term')");
start_timed_wait($waiter, 'term', 'redis_lock_acquire');
waits($node_b, $waiter);
usleep(300_000);
my $worker = worker_pid();
is($node_b->safe_psql('postgres', "SELECT pg_terminate_backend($worker)"),
	't', 'B\'s worker is terminated while a waiter waits');
ok(defined wait_until(10, sub { !kill(0, $worker) }), 'and exits');
usleep(300_000);
($granted, $secs) = granted_after($waiter, release_at($holder, 'term'));
is($granted, 't', 'the waiter got the lock all the same');
cmp_ok($secs, '<', 1.2, 'within 1.2 s of the release');
$waiter->quit;
ok(defined wait_until(15, sub { my $pid = worker_pid(); $pid ne '' && $pid ne $worker }),
	'a new worker runs');
ok(defined wait_until(5, sub { subscribed() == 0 }), 'nobody listens any more');
@waiters = map { new_session($node_b) } 1 .. 2;
session_query($holder, "SELECT redis_lock_acquire_session('again$_')") for 0 .. 1;
start_timed_wait($waiters[$_], "again$_", 'redis_lock_acquire') for 0 .. 1;
waits($node_b, $_) for @waiters;
wait_until(5, sub { sharded_channels() == 2 });
@subs = subscribed();
is(scalar @subs, 1, 'two later waiters of B: one subscribed Redis connection');
like($subs[0] // '', qr/\bssub=2\b/, 'listening to both wake channels');
for my $i (0 .. 1)
{
	($granted, $secs) = granted_after($waiters[$i], release_at($holder, "again$i"));
	is($granted, 't', "later waiter $i got the lock at the release");
}
$_->quit for @waiters;

# --- the worker's subscription connection closed while a backend waits
$waiter = new_session($node_b);
session_query($holder, "SELECT redis_lock_acquire_session('lost')");
start_timed_wait($waiter, 'lost', 'redis_lock_acquire');
waits($node_b, $waiter);
wait_until(5, sub { sharded_channels() == 1 });
@subs = subscribed();
is(scalar @subs, 1, 'a waiter of B is listened for');
my ($killed) = ($subs[0] // '') =~ /\bid=(\d+)/;
is($redis->cli('CLIENT', 'KILL', 'ID', $killed // 0), '1', 'its subscription connection is closed');
ok( defined wait_until(
		5,
		sub {
			my @now = subscribed();
			@now == 1 && $now[0] =~ /\bssub=1\b/ && $now[0] !~ /\bid=$killed\b/;
		}),
	'another connection listens for it');
($granted, $secs) = granted_after($waiter, release_at($holder, 'lost'));
is($granted, 't', 'the waiter got the lock at the release');
cmp_ok($secs, '<', 0.2, 'within 0.2 s');
$waiter->quit;

# --- a database without a worker: its first wait asks for one
$node_b->safe_psql('postgres', 'CREATE DATABASE other');
$node_b->safe_psql(
	'other', qq{
	CREATE EXTENSION redislock;
	ALTER SERVER redislock OPTIONS (SET port '$port');
	GRANT USAGE ON FOREIGN SERVER redislock TO PUBLIC;
});

# The redislock workers of B's database other
sub other_workers
{
	return $node_b->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'redislock worker' AND datname = 'other'"
	);
}

# A session of B in database other
sub other_session
{
	my $s = $node_b->background_psql('other', on_error_stop => 0, timeout => 120);
	$s->set_query_timer_restart;
	return $s;
}

is(other_workers(), '0', 'no worker runs for database other');
$waiter = other_session();
session_query($holder, "SELECT redis_lock_acquire_session('first')");
start_timed_wait($waiter, 'first', 'redis_lock_acquire');
ok(defined wait_until(5, sub { other_workers() eq '1' }), 'its first wait asks for one');
($granted, $secs) = granted_after($waiter, release_at($holder, 'first'));
is($granted, 't', 'and gets the lock at the release');
cmp_ok($secs, '<', 0.2, 'within 0.2 s');
$waiter->quit;
ok(defined wait_until(5, sub { subscribed() == 0 }), 'nobody listens any more');
@waiters = map { other_session() } 1 .. 2;
session_query($holder, "SELECT redis_lock_acquire_session('first$_')") for 0 .. 1;
start_timed_wait($waiters[$_], "first$_", 'redis_lock_acquire') for 0 .. 1;
ok(defined wait_until(5, sub { sharded_channels() == 2 }), 'two later waits of database other');
@subs = subscribed();
is(scalar @subs, 1, 'share the subscription connection of its worker');
for my $i (0 .. 1)
{
	($granted, $secs) = granted_after($waiters[$i], release_at($holder, "first$i"));
	is($granted, 't', "later waiter $i of database other got the lock at the release");
}
$_->quit for @waiters;

# --- keyspace events: another client's DEL and an expiry wake the waiter
# A new server of B, whose subscription connection learns that Redis
# publishes keyspace events
is($redis->cli('CONFIG', 'SET', 'notify-keyspace-events', 'Kgx'), 'OK',
	'keyspace events for generic commands and expiries');
add_server($node_b, 'events', $port);

# How many clients listen to the keyspace channel of $key
sub keyspace_listeners
{
	my ($key) = @_;
	my $reply = $redis->command('PUBSUB', 'NUMSUB', "__keyspace\@0__:$key");
	return $reply->[1];
}

@waiters = map { new_session($node_b, 'events') } 1 .. 2;
for my $i (0 .. 1)
{
	$redis->cli('SET', "ks$i", 'someone', 'PX', '30000');
	start_timed_wait($waiters[$i], "ks$i", 'redis_lock_acquire');
	waits($node_b, $waiters[$i]);
}
wait_until(5,
	sub { sharded_channels() == 2 && keyspace_listeners('ks0') + keyspace_listeners('ks1') == 2 });
@subs = subscribed();
is(scalar @subs, 1, 'two waiters for keys of another client: one subscribed Redis connection');
like($subs[0] // '', qr/\bsub=2\b.*\bssub=2\b/,
	'listening to both keyspace channels and both wake channels');
for my $i (0 .. 1)
{
	my $t_del = Time::HiRes::time();
	$redis->command('DEL', "ks$i");
	($granted, $secs) = granted_after($waiters[$i], $t_del);
	is($granted, 't', "the waiter for ks$i got the lock at the other client's DEL");
}
ok(defined wait_until(5, sub { keyspace_listeners('ks0') + keyspace_listeners('ks1') == 0 }),
	'the waits over, their keyspace channels are no longer listened to');
$waiters[1]->quit;
$waiter = $waiters[0];

@ms = ();
for (1 .. 5)
{
	$redis->cli('SET', 'ks', 'someone', 'PX', '30000');
	start_timed_wait($waiter, 'ks', 'redis_lock_acquire');
	waits($node_b, $waiter);
	usleep(200_000);
	my $t_del = Time::HiRes::time();
	$redis->command('DEL', 'ks');
	($granted, $secs) = granted_after($waiter, $t_del);
	is($granted, 't', "foreign DEL $_: the waiter got the lock");
	push @ms, 1000 * $secs;
}
diag 'foreign DEL ms: ' . join(' ', map { sprintf '%.1f', $_ } @ms);
cmp_ok(median(@ms), '<', 10, 'another client\'s DEL wakes the waiter within 10 ms (median of 5)');

@ms = ();
for (1 .. 5)
{
	# the lease ends 300 ms after the SET was sent, or a little later
	my $t_expiry = Time::HiRes::time() + 0.3;
	$redis->command('SET', 'ks', 'someone', 'PX', '300');
	start_timed_wait($waiter, 'ks', 'redis_lock_acquire');
	($granted, $secs) = granted_after($waiter, $t_expiry);
	is($granted, 't', "expiry $_: the waiter got the lock");
	push @ms, 1000 * $secs;
}
diag 'expiry ms: ' . join(' ', map { sprintf '%.1f', $_ } @ms);
cmp_ok(median(@ms), '<', 10, 'an expiry wakes the waiter within 10 ms (median of 5)');

$waiter->quit;
$holder->quit;
$keeper->quit;
$node_a->stop;
$node_b->stop;
done_testing();
