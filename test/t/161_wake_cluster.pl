# A release wakes the waiter on a Redis Cluster of 3 masters: the waiter
# subscribes with sharded pub/sub (SSUBSCRIBE) on the master of the key's
# slot and the release announces itself there (SPUBLISH).  After the slot
# moved to another master, the waiter subscribes where the slot is now, and
# a waiter subscribed while the slot moves is still woken.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use RedisCluster;
use RedisClusterTest qw(new_cluster_node user_key_on);
use RedisLockTest qw(session_query start_query finish_query key_slot);
use WakeTest qw(new_session waits hand_off median);

my $cluster = RedisCluster->start_cluster(masters => 3, node_timeout => 1000);
my ($m1, $m2) = $cluster->masters;
my $node = new_cluster_node('wake_cluster', $cluster, key_prefix => 'w:');
my $key = user_key_on($cluster, $m1, 'w:', 'hot');
my $slot = key_slot("w:$key");

# The clients of a master subscribed to a sharded channel
sub sharded_subscribers
{
	my ($port) = @_;
	return scalar grep { /\bssub=[1-9]/ }
	  split /\n/, $cluster->command($port, 'CLIENT', 'LIST');
}

# How many times a master announced a release
sub announcements
{
	my ($port) = @_;
	my ($calls) = $cluster->command($port, 'INFO', 'commandstats') =~
	  /cmdstat_spublish:calls=(\d+)/;
	return $calls // 0;
}

my $holder = new_session($node);
my $waiter = new_session($node);

# A few hand-offs of the key: whether all got it, and their median in ms
sub hand_offs
{
	my ($what) = @_;
	my ($all, @ms) = (1);
	for (1 .. 5)
	{
		my ($granted, $ms) = hand_off($node, $holder, $waiter, $key);
		$all &&= $granted eq 't';
		push @ms, $ms;
	}
	note "$what, hand-off ms: " . join(' ', map { sprintf '%.1f', $_ } @ms);
	return ($all, median(@ms));
}

my ($all, $ms) = hand_offs('on the first master');
ok($all, 'the waiter got the lock each time');
cmp_ok($ms, '<', 10, 'a release wakes the waiter within 10 ms (median of 5)');
is(sharded_subscribers($m1), 1, 'the waiter listens on the master of the key, sharded');
cmp_ok(announcements($m1), '>=', 5, 'where the releases announced themselves');

# --- the slot moved: the waiter follows it
$cluster->migrate_slot($slot, $m1, $m2);
($all, $ms) = hand_offs('after the slot moved');
ok($all, 'after the slot moved, the waiter got the lock each time');
cmp_ok($ms, '<', 10, 'woken within 10 ms (median of 5)');
is(sharded_subscribers($m2), 1, 'listening on the master that serves the slot now');
is(sharded_subscribers($m1), 0, 'and no more on the one that served it');

# --- the slot moves while the waiter waits
session_query($holder, "SELECT redis_lock_acquire_session('$key')");
start_query($waiter, "SELECT redis_lock_acquire_session('$key', 30000, 10000)");
waits($node, $waiter);
usleep(200_000);
$cluster->migrate_slot($slot, $m2, $m1);
session_query($holder, "SELECT redis_lock_release('$key')");
my ($out, $err, $secs) = finish_query($waiter, 10);
is($out, 't', 'a waiter subscribed while the slot moved gets the lock');
cmp_ok($secs, '<', 1, 'promptly');
session_query($waiter, "SELECT redis_lock_release('$key')");

$node->stop;
done_testing();
