# A release wakes the waiter on a Redlock server of 3 masters: the waiter
# listens on every master, each master announces the release, and the first
# announcement wakes it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisMasters;
use RedlockTest qw(new_redlock_node);
use WakeTest qw(new_session hand_off median);

my $masters = RedisMasters->start_masters(3);
my @m = map { $masters->master($_) } 0 .. 2;
my $node = new_redlock_node('wake_redlock', $masters, key_prefix => 'rl:');
my $holder = new_session($node);
my $waiter = new_session($node);

my ($all, @ms) = (1);
for (1 .. 5)
{
	my ($granted, $ms) = hand_off($node, $holder, $waiter, 'hot');
	$all &&= $granted eq 't';
	push @ms, $ms;
}
note 'hand-off ms: ' . join(' ', map { sprintf '%.1f', $_ } @ms);
ok($all, 'the waiter got the lock each time');
cmp_ok(median(@ms), '<', 10, 'a release wakes the waiter within 10 ms (median of 5)');
for my $i (0 .. 2)
{
	is(scalar(grep { /\bssub=[1-9]/ } split /\n/, $m[$i]->command('CLIENT', 'LIST')),
		1, "the waiter listens on master $i");
	my ($calls) = $m[$i]->command('INFO', 'commandstats') =~ /cmdstat_spublish:calls=(\d+)/;
	cmp_ok($calls // 0, '>=', 5, "master $i announced each release");
}

$node->stop;
done_testing();
