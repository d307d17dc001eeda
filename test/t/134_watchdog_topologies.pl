# The lease watchdog on every kind of server, with redislock preloaded: a
# 2 s lease held through a 7 s transaction on a Redis Cluster, on a master
# under Sentinel and on a Redlock server of 3 masters.  On each, a foreign
# SET NX PX on the key (on every master, for Redlock) never gets it, its
# PTTL stays positive, COMMIT succeeds and the renewals are counted.  On
# Redlock, with one master stopped the quorum still renews a session
# lock's lease; with two stopped the lease lapses, and the loss is
# counted.  The master left then keeps the key for up to one more ttl: the
# renewals tried until the lease ran out reached it, though no quorum.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RedisCluster;
use RedisMasters;
use RedisSentinel;
use RedisLockTest qw(session_query wait_until session works);

my $t0 = time;
my $cluster = RedisCluster->start_cluster(masters => 3, replicas => 0);
my $group = RedisSentinel->start_sentinel_group(replicas => 1, sentinels => 1);
my $masters = RedisMasters->start_masters(3);
diag sprintf 'cluster, Sentinel group and Redlock masters up in %d s', time - $t0;

my $seeds = $cluster->seeds;
my $sentinels = $group->sentinels;
my $mname = $group->master_name;
my $redlock = $masters->endpoints;
my $node = PostgreSQL::Test::Cluster->new('watchdog_topologies');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'redislock'");
$node->start;
$node->safe_psql(
	'postgres', qq{
	CREATE EXTENSION redislock;
	CREATE SERVER rc FOREIGN DATA WRAPPER redislock OPTIONS (cluster '$seeds');
	CREATE SERVER ha FOREIGN DATA WRAPPER redislock
		OPTIONS (sentinel '$sentinels', sentinel_master '$mname');
	CREATE SERVER rl FOREIGN DATA WRAPPER redislock OPTIONS (redlock '$redlock');
});

# The counter $name of server $server in redis_stats().
sub counter
{
	my ($server, $name) = @_;
	return $node->safe_psql('postgres',
		"SELECT $name FROM redis_stats() WHERE server = '$server'");
}

# For $seconds, every 100 ms, on each node in @$targets (pairs of a
# topology or node handle and a port, or undef for a plain node): does a
# foreign SET NX on $key get it, and is its PTTL not positive?  Returns the
# number of times either happened.
sub foreign_attempts
{
	my ($key, $seconds, @targets) = @_;
	my $bad = 0;
	my $end = time + $seconds;
	while (time < $end)
	{
		foreach my $target (@targets)
		{
			my $set = $target->('SET', $key, 'foreign', 'NX', 'PX', '60000');
			$bad++ if defined $set && $set eq 'OK';
			$bad++ if $target->('PTTL', $key) <= 0;
		}
		usleep(100_000);
	}
	return $bad;
}

# A 2 s lease held through a 7 s transaction on $server, with @targets as
# foreign_attempts takes them.
sub held_through_transaction
{
	my ($server, $key, $what, @targets) = @_;
	my $s = session($node);
	my $renewals = counter($server, 'renewals');

	works($s,
		"SET redislock.server = $server; BEGIN; SELECT redis_lock_acquire('$key', 2000)",
		't', "$what: a transaction takes a lock with a 2 s lease");
	is(foreign_attempts($key, 7, @targets), 0,
		"$what: for 7 s, a foreign SET NX never gets the key and its PTTL stays positive");
	works($s, 'COMMIT', '', "$what: COMMIT succeeds");
	cmp_ok(counter($server, 'renewals') - $renewals, '>=', 5,
		"$what: the renewals are counted");
	$s->quit;
	return;
}

my $cluster_key = 'w:cluster';
my $slot_master = $cluster->master_for_key($cluster_key);
held_through_transaction('rc', $cluster_key, 'Redis Cluster',
	sub { $cluster->command($slot_master, @_) });

my $master_port = $group->master_port;
held_through_transaction('ha', 'w:sentinel', 'Sentinel',
	sub { $group->command($master_port, @_) });

my @m = map { $masters->master($_) } 0 .. 2;
held_through_transaction('rl', 'w:redlock', 'Redlock',
	map { my $m = $_; sub { $m->command(@_) } } @m);

# --- Redlock with masters stopped
my $s = session($node);
works($s, "SET redislock.server = rl; SELECT redis_lock_acquire_session('w:one', 2000)",
	't', 'Redlock: a session lock with a 2 s lease');
$masters->stop_node($m[0]->port);
is(foreign_attempts('w:one', 5, map { my $m = $_; sub { $m->command(@_) } } @m[1, 2]),
	0, 'with one master stopped, the quorum renews it: for 5 s its PTTL stays positive');
works($s, "SELECT redis_lock_release('w:one')", 't', 'and the session still holds it');

my $lost = counter('rl', 'leases_lost');
works($s, "SELECT redis_lock_acquire_session('w:two', 2000)",
	't', 'with one master stopped, another session lock with a 2 s lease');
$masters->stop_node($m[1]->port);
my $secs = wait_until(10, sub { $m[2]->command('EXISTS', 'w:two') eq '0' });
ok(defined $secs && $secs < 5,
	sprintf 'with two masters stopped, the lease lapses: the master left lets the key expire within 2 x ttl_ms + 1 s (%.2f s)',
	$secs // -1);
ok(defined wait_until(5, sub { counter('rl', 'leases_lost') - $lost == 1 }),
	'and the watchdog counts the lost lease');
$s->quit;

$node->stop;

done_testing();
