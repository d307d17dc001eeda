# redis_stats() on a Redis Cluster, with redislock preloaded: a slot moved
# to another master is a redirect (MOVED followed), and no failover; a
# master killed and replaced by its replica is one failover.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisCluster;
use RedisClusterTest qw(new_cluster_node session works user_key_on);
use RedisLockTest qw(session_query key_slot wait_until);

my $cluster = RedisCluster->start_cluster(masters => 3, replicas => 1);
my $node = new_cluster_node('stats_cluster', $cluster,
	conf => "shared_preload_libraries = 'redislock'");
my $s = session($node);

# The counters of server rc named in @names, as "name=value ...".
sub counters
{
	my (@names) = @_;
	my ($out, $err) = session_query($s,
		'SELECT ' . join(" || ' ' || ", map { "'$_=' || $_" } @names)
		  . " FROM redis_stats() WHERE server = 'rc'");
	return "$out$err";
}

my ($m1, $m2) = $cluster->masters;
my $moved = user_key_on($cluster, $m1, '', 'moved');
works($s, "SELECT redis_lock_acquire_session('$moved', 60000)", 't',
	'a lock is taken');
is(counters(qw(redirects failovers)), 'redirects=0 failovers=0',
	'no redirect, no failover');

# a slot moved: the next call meets MOVED and follows it
my ($m3) = grep { $_ != $m1 && $_ != $m2 } $cluster->masters;
$cluster->migrate_slot(key_slot($moved), $m1, $m3);
works($s, "SELECT redis_lock_extend('$moved', 60000)", 't',
	'a lock whose slot moved is extended where it went');
is(counters(qw(redirects failovers)), 'redirects=1 failovers=0',
	'one redirect');

# a master killed: its replica is promoted, and the next call on one of its
# keys finds the new master
my $dead = user_key_on($cluster, $m2, '', 'dead');
works($s, "SELECT redis_lock_acquire_session('$dead', 60000), redis_lock_release('$dead')",
	"t|t", 'a lock on the second master is taken and released');
$cluster->kill_master($m2);
$cluster->wait_for_failover($m2);
ok(defined wait_until(20, sub {
	(session_query($s, "SELECT redis_lock_acquire_session('$dead', 60000)"))[0] eq 't' }),
	'once its replica is promoted, a lock on its keys is taken again');
is(counters(qw(failovers)), 'failovers=1', 'one failover');

$s->quit;
$node->stop;

done_testing();
