# A release wakes the waiter on a Sentinel server: the waiter listens on
# the master that the Sentinels name, and after a failover on the new one.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisSentinel;
use RedisLockTest;
use WakeTest qw(new_session hand_off median);

my $group = RedisSentinel->start_sentinel_group(
	replicas         => 1,
	sentinels        => 3,
	down_after       => 1000,
	failover_timeout => 5000);
my $sentinels = $group->sentinels;
my $mname = $group->master_name;
my $first = $group->master_port;

my $node = RedisLockTest->new_node('wake_sentinel', $group->node($first));
$node->safe_psql(
	'postgres', qq{
	CREATE SERVER ha FOREIGN DATA WRAPPER redislock
		OPTIONS (sentinel '$sentinels', sentinel_master '$mname', key_prefix 'ha:');
	GRANT USAGE ON FOREIGN SERVER ha TO PUBLIC;
});
my $holder = new_session($node, 'ha');
my $waiter = new_session($node, 'ha');

# The clients of a node subscribed to a sharded channel
sub sharded_subscribers
{
	my ($port) = @_;
	return scalar grep { /\bssub=[1-9]/ }
	  split /\n/, $group->command($port, 'CLIENT', 'LIST');
}

# A few hand-offs: whether all got the lock, and their median in ms
sub hand_offs
{
	my ($what) = @_;
	my ($all, @ms) = (1);
	for (1 .. 5)
	{
		my ($granted, $ms) = hand_off($node, $holder, $waiter, 'hot');
		$all &&= $granted eq 't';
		push @ms, $ms;
	}
	note "$what, hand-off ms: " . join(' ', map { sprintf '%.1f', $_ } @ms);
	return ($all, median(@ms));
}

my ($all, $ms) = hand_offs('first master');
ok($all, 'the waiter got the lock each time');
cmp_ok($ms, '<', 10, 'a release wakes the waiter within 10 ms (median of 5)');
is(sharded_subscribers($first), 1, 'the waiter listens on the master');

$group->failover;
my $second = $group->master_port;
isnt($second, $first, 'a failover names another master');
# until the old master learns that it is a replica, it still takes writes
RedisLockTest::sleep_for(1.5);
($all, $ms) = hand_offs('after the failover');
ok($all, 'after the failover, the waiter got the lock each time');
cmp_ok($ms, '<', 10, 'woken within 10 ms (median of 5)');
is(sharded_subscribers($second), 1, 'listening on the new master');

$node->stop;
done_testing();
