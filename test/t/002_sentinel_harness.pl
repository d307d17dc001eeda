# Checks RedisSentinel: a master with 2 replicas under 3 Sentinels, all with
# passwords, starts; replicas stop and start; a killed master and a
# SENTINEL FAILOVER each put a replica in its place, with the data.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RedisSentinel;

my $t0 = time;
my $group = RedisSentinel->start_sentinel_group(
	replicas          => 2,
	sentinels         => 3,
	master_name       => 'mymaster',
	down_after        => 1000,
	failover_timeout  => 5000,
	password          => 'pw',
	sentinel_password => 'spw');
diag sprintf 'master, 2 replicas and 3 sentinels up in %d s', time - $t0;

# Shape
like($group->sentinels, qr/^127\.0\.0\.1:\d+(, 127\.0\.0\.1:\d+){2}$/, 'sentinels lists three');
is($group->master_name, 'mymaster', 'master name');
my $first = $group->master_port;
is($first, ($group->data_ports)[0], 'the Sentinels give the first master');
is($group->role($first), 'master', 'which says it is one');
is(scalar $group->replica_ports, 2, 'two replicas');
is($group->role($_), 'slave', "port $_ is a replica") foreach $group->replica_ports;
my ($sentinel) = $group->sentinel_ports;
like((run_command([ 'redis-cli', '-p', $sentinel, 'PING' ]))[0],
	qr/NOAUTH/, 'Sentinels want their password');
like((run_command([ 'redis-cli', '-p', $first, 'PING' ]))[0],
	qr/NOAUTH/, 'data nodes want theirs');

is($group->cli($first, 'SET', 'k', 'v'), 'OK', 'the master takes a write');
is($group->cli($first, 'WAIT', 2, 2000), 2, 'both replicas acknowledge it');

# Replicas stopped and started again
my @stopped = $group->stop_all_replicas;
is(scalar @stopped, 2, 'two replicas stopped');
is($group->cli($first, 'WAIT', 1, 100), 0, 'no replica acknowledges then');
$group->start_replicas;
is($group->cli($first, 'WAIT', 2, 2000), 2, 'both acknowledge again after start_replicas');

# The master killed
$group->kill_master;
my $secs = $group->wait_for_new_master;
my $second = $group->master_port;
isnt($second, $first, 'the Sentinels give a new master');
ok(1, sprintf('promotion after a killed master took %.1f s', $secs));
is($group->cli($second, 'GET', 'k'), 'v', 'the new master has the data');
$group->restart_node($first);
is($group->role($first), 'slave', 'the old master came back as a replica');
is($group->cli($first, 'GET', 'k'), 'v', 'in sync');

# SENTINEL FAILOVER
$secs = $group->failover;
my $third = $group->master_port;
isnt($third, $second, 'SENTINEL FAILOVER gives another master');
ok(1, sprintf('SENTINEL FAILOVER took %.1f s', $secs));
is($group->role($third), 'master', 'which says it is one');
is($group->cli($third, 'GET', 'k'), 'v', 'and has the data');
diag sprintf 'whole test took %d s', time - $t0;

done_testing();
