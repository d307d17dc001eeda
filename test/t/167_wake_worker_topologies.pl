# With redislock preloaded, the worker's subscriptions wake the waiters of
# its database on every topology: two PostgreSQL servers, A holding and B
# waiting, share a Redis Cluster (the worker listens on the master of the
# key's slot, and follows the slot when it moves while B waits), a Sentinel
# group (on the master, and on the new one after a failover that comes
# while B waits) and a Redlock server of 3 masters (on every master).
# Each time a release on A wakes the waiter on B at once, and two waiters
# of B share one subscription connection per Redis node.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use RedisCluster;
use RedisClusterTest qw(new_cluster_node user_key_on);
use RedisLockTest qw(session_query start_query finish_query key_slot
  wait_until);
use RedisMasters;
use RedisSentinel;
use RedlockTest qw(new_redlock_node);
use WakeTest qw(new_session waits start_timed_wait release_at granted_after
  hand_off median);

my $preload = "shared_preload_libraries = 'redislock'\n"
  . "redislock.recover_interval = 0";

# The CLIENT LIST lines, in $list, of the clients subscribed to a sharded
# channel (a Sentinel listens to the master on a channel of its own)
sub subscribed_in
{
	my ($list) = @_;
	return grep { /\bssub=[1-9]/ } split /\n/, $list;
}

# How many sharded channels the clients of CLIENT LIST lines listen to
sub channels_in
{
	my $n = 0;
	$n += $_ for map { /\bssub=(\d+)/ } @_;
	return $n;
}

# A session of B that holds a lock all along, so that B's worker renews it
# and runs; returns once that worker shows
sub keep_worker
{
	my ($node_b, $server) = @_;
	my $keeper = new_session($node_b, $server);
	session_query($keeper, "SELECT redis_lock_acquire_session('keep', 3000)");
	ok( defined wait_until(
			15,
			sub {
				$node_b->safe_psql('postgres',
					"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'redislock worker' AND datname = 'postgres'"
				) eq '1';
			}),
		'B runs a worker for database postgres');
	return $keeper;
}

# Hand-offs of $key from $holder (on A) to $waiter (on $node_b): whether
# the waiter got it each time, and the median ms from release to grant
sub hand_offs
{
	my ($node_b, $holder, $waiter, $key, $what) = @_;
	my ($all, @ms) = (1);
	for (1 .. 5)
	{
		my ($granted, $ms) = hand_off($node_b, $holder, $waiter, $key);
		$all &&= $granted eq 't';
		push @ms, $ms;
	}
	diag "$what, hand-off ms: " . join(' ', map { sprintf '%.1f', $_ } @ms);
	ok($all, "$what: the waiter on B got the lock each time");
	cmp_ok(median(@ms), '<', 10, "$what: a release on A wakes it within 10 ms (median of 5)");
	return;
}

# Two sessions of $node_b wait for @$keys, which $holder (on A) holds; the
# code refs of @$lists give the CLIENT LIST of each Redis node that serves
# the keys, where one connection must listen to both wake channels.  Then
# the holder releases them.
sub shared_subscription
{
	my ($node_b, $server, $holder, $keys, $lists, $what) = @_;
	my @waiters = map { new_session($node_b, $server) } @$keys;
	for my $i (0 .. $#waiters)
	{
		session_query($holder, "SELECT redis_lock_acquire_session('$keys->[$i]')");
		start_query($waiters[$i], "SELECT redis_lock_acquire('$keys->[$i]', 30000, 20000)");
		waits($node_b, $waiters[$i]);
	}
	for my $n (0 .. $#$lists)
	{
		my @subs;
		wait_until(5,
			sub { @subs = subscribed_in($lists->[$n]->()); channels_in(@subs) == 2 });
		is(scalar @subs, 1, "$what, node $n: two waiters of B, one subscribed connection");
		like($subs[0] // '', qr/\bssub=2\b/, "$what, node $n: listening to both wake channels");
	}
	for my $i (0 .. $#waiters)
	{
		session_query($holder, "SELECT redis_lock_release('$keys->[$i]')");
		my ($out, $err) = finish_query($waiters[$i], 10);
		is("$out$err", 't', "$what: waiter $i got the lock at the release");
		$waiters[$i]->quit;
	}
	return;
}

# --- Redis Cluster of 3 masters
my $cluster = RedisCluster->start_cluster(masters => 3, node_timeout => 1000);
my ($m1, $m2) = $cluster->masters;
my $node_a = new_cluster_node('wwt_cluster_a', $cluster, key_prefix => 'w:', conf => $preload);
my $node_b = new_cluster_node('wwt_cluster_b', $cluster, key_prefix => 'w:', conf => $preload);
my $keeper = keep_worker($node_b);
my $holder = new_session($node_a);
my $waiter = new_session($node_b);
my $key = user_key_on($cluster, $m1, 'w:', 'hot');
my $slot = key_slot("w:$key");

# The clients of a master subscribed to a sharded channel
sub sharded_on
{
	my ($port) = @_;
	return scalar subscribed_in($cluster->command($port, 'CLIENT', 'LIST'));
}

hand_offs($node_b, $holder, $waiter, $key, 'cluster');
shared_subscription($node_b, undef, $holder,
	[ $key, user_key_on($cluster, $m1, 'w:', 'other') ],
	[ sub { $cluster->command($m1, 'CLIENT', 'LIST') } ], 'cluster');

# the slot moves to another master while B waits
session_query($holder, "SELECT redis_lock_acquire_session('$key')");
start_timed_wait($waiter, $key);
waits($node_b, $waiter);
usleep(200_000);
$cluster->migrate_slot($slot, $m1, $m2);
ok(defined wait_until(5, sub { sharded_on($m2) == 1 && sharded_on($m1) == 0 }),
	'cluster: B listens where the slot moved, and no more where it was');
my ($granted, $secs) = granted_after($waiter, release_at($holder, $key));
is($granted, 't', 'cluster: the waiter got the lock after its slot moved');
cmp_ok($secs, '<', 0.2, 'within 0.2 s of the release');
session_query($waiter, "SELECT redis_lock_release('$key')");
hand_offs($node_b, $holder, $waiter, $key, 'cluster, after the slot moved');

$_->quit for ($keeper, $holder, $waiter);
$_->stop for ($node_a, $node_b);

# --- Sentinel, a master and a replica under 3 Sentinels
my $group = RedisSentinel->start_sentinel_group(
	replicas         => 1,
	sentinels        => 3,
	down_after       => 1000,
	failover_timeout => 5000);
my $sentinels = $group->sentinels;
my $mname = $group->master_name;
my $first = $group->master_port;
($node_a, $node_b) = map {
	my $node = RedisLockTest->new_node("wwt_sentinel_$_", $group->node($first),
		conf => $preload);
	$node->safe_psql(
		'postgres', qq{
		CREATE SERVER ha FOREIGN DATA WRAPPER redislock
			OPTIONS (sentinel '$sentinels', sentinel_master '$mname', key_prefix 'ha:');
		GRANT USAGE ON FOREIGN SERVER ha TO PUBLIC;
	});
	$node;
} qw(a b);
$keeper = keep_worker($node_b, 'ha');
$holder = new_session($node_a, 'ha');
$waiter = new_session($node_b, 'ha');

hand_offs($node_b, $holder, $waiter, 'hot', 'sentinel');
shared_subscription($node_b, 'ha', $holder, [ 'one', 'two' ],
	[ sub { $group->command($first, 'CLIENT', 'LIST') } ], 'sentinel');

# a failover while B waits
session_query($holder, "SELECT redis_lock_acquire_session('span')");
start_timed_wait($waiter, 'span');
waits($node_b, $waiter);
usleep(200_000);
$group->failover;
my $second = $group->master_port;
isnt($second, $first, 'sentinel: a failover while B waits names another master');
# until the old master learns that it is a replica, it still takes writes
usleep(1_500_000);
($granted, $secs) = granted_after($waiter, release_at($holder, 'span'));
is($granted, 't', 'sentinel: the waiter got the lock after the failover');
cmp_ok($secs, '<', 0.2, 'within 0.2 s of the release');
session_query($waiter, "SELECT redis_lock_release('span')");

hand_offs($node_b, $holder, $waiter, 'hot', 'sentinel, after the failover');
shared_subscription($node_b, 'ha', $holder, [ 'one', 'two' ],
	[ sub { $group->command($second, 'CLIENT', 'LIST') } ], 'sentinel, after the failover');

$_->quit for ($keeper, $holder, $waiter);
$_->stop for ($node_a, $node_b);

# --- Redlock over 3 masters
my $masters = RedisMasters->start_masters(3);
($node_a, $node_b) =
  map { new_redlock_node("wwt_redlock_$_", $masters, key_prefix => 'rl:', conf => $preload) }
  qw(a b);
$keeper = keep_worker($node_b);
$holder = new_session($node_a);
$waiter = new_session($node_b);

hand_offs($node_b, $holder, $waiter, 'hot', 'redlock');
shared_subscription($node_b, undef, $holder, [ 'one', 'two' ],
	[ map { my $m = $masters->master($_); sub { $m->command('CLIENT', 'LIST') } } 0 .. 2 ],
	'redlock');

$_->quit for ($keeper, $holder, $waiter);
$_->stop for ($node_a, $node_b);
done_testing();
