# Checks RedisCluster: a 3 x 2 cluster with a password starts and serves
# every slot, keys are routed and redirected, a slot migrates (and shows ASK
# half way), and a killed or paused master's replica takes over with the
# data.
use strict;
use warnings;

use List::Util qw(sum);
use PostgreSQL::Test::Utils;
use Test::More;
use RedisCluster;
use RedisLockTest qw(key_slot);

my $t0 = time;
my $cluster = RedisCluster->start_cluster(
	masters      => 3,
	replicas     => 1,
	node_timeout => 1000,
	args         => [ '--requirepass', 'pw', '--masterauth', 'pw' ]);
diag sprintf 'cluster of 6 nodes up in %d s', time - $t0;

# Shape
my @ports = $cluster->all_ports;
is(scalar @ports, 6, 'six nodes');
ok(!(grep { $_ >= 22768 } @ports), 'ports leave room for bus ports below 32768');
like($cluster->seeds, qr/^127\.0\.0\.1:\d+(, 127\.0\.0\.1:\d+){5}$/, 'seeds list every node');
my @masters = $cluster->masters;
is(scalar @masters, 3, 'three masters serve slots');
is(scalar(map { $cluster->replicas_of($_) } @masters), 3, 'each master has a replica');
my $covered = sum map {
	my ($lo, $hi) = split /-/;
	($hi // $lo) - $lo + 1
} map { @{ $_->{slots} } } $cluster->nodes;
is($covered, 16384, 'the masters cover every slot');
like((run_command([ 'redis-cli', '-p', $ports[0], 'PING' ]))[0],
	qr/NOAUTH/, 'nodes want the password');

# Slots and routing
is($cluster->keyslot('foo'), 12182, 'keyslot asks the cluster');
is($cluster->keyslot('{user1}.a'), $cluster->keyslot('{user1}.b'), 'hash tags share a slot');
is( join(',', map { key_slot($_) } 'foo', '{user1}.a', 'a{}b', '{}x{y}', 'x{y'),
	join(',', map { $cluster->keyslot($_) } 'foo', '{user1}.a', 'a{}b', '{}x{y}', 'x{y'),
	'RedisLockTest::key_slot agrees with CLUSTER KEYSLOT');

my %key_of = map { $_ => $cluster->key_for_master($_, 'k') } @masters;
is($cluster->master_for_key($key_of{$_}), $_, "key $key_of{$_} belongs to port $_")
  foreach @masters;
my ($m1, $m2, $m3) = @masters;
is($cluster->cli($m1, 'SET', $key_of{$m1}, 'v1'), 'OK', 'its master takes a key');
like($cluster->cli($m2, 'GET', $key_of{$m1}), qr/^MOVED \d+ 127\.0\.0\.1:$m1$/,
	'another master answers MOVED');
is($cluster->cli_key($key_of{$m1}, 'GET', $key_of{$m1}), 'v1', 'cli_key reaches the key');

# A slot migrated in one go
my $slot = $cluster->keyslot('{mig}');
my $from = $cluster->slot_owner($slot);
my ($to) = grep { $_ != $from } @masters;
$cluster->cli_key('{mig}', 'MSET', map { ("{mig}$_", $_) } 1 .. 150);
$cluster->migrate_slot($slot, $from, $to);
is($cluster->slot_owner($slot), $to, "slot $slot moved to port $to");
is($cluster->cli($to, 'CLUSTER', 'COUNTKEYSINSLOT', $slot), 150, 'its keys are on the target');
is($cluster->cli($from, 'CLUSTER', 'COUNTKEYSINSLOT', $slot), 0, 'and no longer on the source');
like($cluster->cli($from, 'GET', '{mig}1'), qr/^MOVED $slot 127\.0\.0\.1:$to$/,
	'the source redirects with MOVED');

# A slot half migrated: ASK for what moved, MOVED from the target without ASKING
$slot = $cluster->keyslot('{ask}');
$from = $cluster->slot_owner($slot);
($to) = grep { $_ != $from } @masters;
$cluster->cli_key('{ask}', 'MSET', map { ("{ask}$_", $_) } 1 .. 3);
$cluster->begin_migration($slot, $from, $to);
is($cluster->migrate_keys($slot, $from, $to, 2), 2, 'two keys moved');
my @left = split /\n/, $cluster->cli($from, 'CLUSTER', 'GETKEYSINSLOT', $slot, 10);
is(scalar @left, 1, 'one key left on the source');
my ($moved) = grep { $_ ne $left[0] } map { "{ask}$_" } 1 .. 3;
like($cluster->cli($from, 'GET', $moved), qr/^ASK $slot 127\.0\.0\.1:$to$/,
	'plain redis-cli sees ASK for a moved key');
like($cluster->cli($to, 'GET', $moved), qr/^MOVED $slot 127\.0\.0\.1:$from$/,
	'the target wants ASKING first');
is($cluster->cli($from, 'GET', $left[0]), ($left[0] =~ /(\d)$/)[0],
	'the source still answers for the key it has');
is($cluster->cli($from, '-c', 'GET', $moved), ($moved =~ /(\d)$/)[0], 'redis-cli -c follows ASK');
$cluster->finish_migration($slot, $from, $to);
is($cluster->cli($to, 'CLUSTER', 'COUNTKEYSINSLOT', $slot), 3, 'finished: all keys on the target');

# A master killed: its replica takes over, with the key written before
my $victim = $cluster->master_for_key('{fo}');
my ($replica) = $cluster->replicas_of($victim);
$cluster->cli_key('{fo}', 'SET', '{fo}k', 'before');
is($cluster->cli($victim, 'WAIT', 1, 2000), 1, 'the write reached the replica');
$cluster->kill_master($victim);
my $secs = $cluster->wait_for_failover($victim);
ok(1, sprintf('failover after a killed master took %.1f s', $secs));
is($cluster->master_for_key('{fo}'), $replica, 'the replica serves the slot');
is($cluster->cli_key('{fo}', 'GET', '{fo}k'), 'before', 'the key is readable after failover');

$cluster->restart_node($victim);
my ($old) = grep { $_->{port} == $victim } $cluster->nodes;
is($old->{role}, 'replica', 'the old master rejoined as a replica');
is($old->{master_port}, $replica, 'of the promoted one');

# A master paused (SIGSTOP) is failed over too, and rejoins as a replica.
$victim = $cluster->master_for_key('{pa}');
($replica) = $cluster->replicas_of($victim);
$cluster->pause_node($victim);
$secs = $cluster->wait_for_failover($victim);
ok(1, sprintf('failover after a paused master took %.1f s', $secs));
is($cluster->master_for_key('{pa}'), $replica, 'its replica serves the slot');
$cluster->resume_node($victim);
$cluster->wait_until_settled;
($old) = grep { $_->{port} == $victim } $cluster->nodes;
is($old->{role}, 'replica', 'the paused master, resumed, is a replica');
diag sprintf 'whole test took %d s', time - $t0;

done_testing();
