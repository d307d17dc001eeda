# redis_stats() on a Redis Cluster, with redislock preloaded: a slot moved
# to another master is a redirect (MOVED followed), and a master killed and
# replaced by its replica is an error (the node cannot be reached) and a
# failover (the replica serves its slots in the next slot map).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisCluster;
use RedisClusterTest qw(new_cluster_node session works user_key_on);
use RedisLockTest qw(session_query key_slot);

my $cluster = RedisCluster->start_cluster(masters => 3, replicas => 1, node_timeout => 1000);
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
my $item = user_key_on($cluster, $m2, '', 'item');
works($s,
	"SELECT redis_lock_acquire_session('$moved', 60000), redis_stock_set('$item', 5)",
	't|', 'a lock on one master, stock on another');
is(counters(qw(redirects failovers)), 'redirects=0 failovers=0',
	'no redirect, no failover');

# a slot moved: the next call meets MOVED and follows it
my ($m3) = grep { $_ != $m1 && $_ != $m2 } $cluster->masters;
$cluster->migrate_slot(key_slot($moved), $m1, $m3);
works($s, "SELECT redis_lock_extend('$moved', 60000)", 't',
	'a lock whose slot moved is extended where it went');
is(counters(qw(redirects failovers)), 'redirects=1 failovers=0',
	'one redirect');

# a master killed: its replica takes over
$cluster->kill_master($m2);
$cluster->wait_for_failover($m2);
works($s, "SELECT coalesce(redis_stock_get('$item'), 5)", '5',
	'the stock is read from the replica that took over');
my ($out) = session_query($s,
	"SELECT errors >= 1, failovers FROM redis_stats() WHERE server = 'rc'");
is($out, 't|1', 'the lost master is an error, its replica\'s promotion a failover');

$s->quit;
$node->stop;

done_testing();
