# A Redis Cluster master killed (SIGKILL), twice, on a cluster of 3 masters
# and 3 replicas with a node timeout of 1 s:
# - while the slots of the dead master are not served, calls on its keys
#   fail with a class 08 error within the timeouts; once its replica is
#   promoted they succeed, also in a session that used the dead master
#   before, with no user action; redis_server_nodes() shows the new master;
# - with verify_before_commit on, a transaction holding a lock on the dead
#   master commits if the lock had reached the replica before the kill (and
#   the lock is then released on the new master), and fails with 40001 if
#   it had not: the replica is stopped (SIGSTOP) and its link closed by the
#   master before the lock is taken, so that the write never reaches it.
# The failover times, as the cluster and as PostgreSQL see them, are
# reported.
use strict;
use warnings;

use List::Util qw(first);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use RedisCluster;
use RedisClusterTest qw(new_cluster_node session works user_key_on);
use RedisLockTest qw(session_query wait_until);

my $t0 = time;
my $cluster = RedisCluster->start_cluster(masters => 3, replicas => 1, node_timeout => 1000);
diag sprintf 'cluster of 6 nodes up in %d s', time - $t0;
my ($m1, $m2, $m3) = $cluster->masters;
my ($r1) = $cluster->replicas_of($m1);
my ($r2) = $cluster->replicas_of($m2);

my $node = new_cluster_node(
	'failover', $cluster,
	key_prefix => 'f:',
	sql        => 'ALTER DATABASE postgres SET redislock.verify_before_commit = on');

my ($k1, $item1) = map { user_key_on($cluster, $m1, 'f:', $_) } 'a', 'i';
my ($k2, $item2) = map { user_key_on($cluster, $m2, 'f:', $_) } 'b', 'j';
my ($k1b, $k2b) = map { user_key_on($cluster, $m3, 'f:', $_) } 'c', 'd';
my ($first1) = (first { $_->{port} == $m1 } $cluster->nodes)->{slots}[0] =~ /^(\d+)/;

my ($holder, $idle, $poller) = map { session($node) } 1 .. 3;
session_query($poller,
	'SET redislock.connect_timeout = 500; SET redislock.command_timeout = 1000');
my ($out, $err);

# Whether the node on $port holds Redis key $key (SCAN, also on a replica).
sub holds
{
	my ($port, $key) = @_;
	return scalar grep { $_ eq $key } $cluster->node($port)->keys($key);
}

# Call redis_stock_get($key) in the poller session until it succeeds; check
# that every error meanwhile was class 08 and return the seconds since
# $since.
sub poll_until_served
{
	my ($key, $since, $what) = @_;
	my @errors;
	my $ok = wait_until(
		120,
		sub {
			my ($o, $e) = session_query($poller, "SELECT redis_stock_get('$key')");
			return 1 if $e eq '' && $o ne '';
			push @errors, $e;
			usleep(100_000);
			return 0;
		});
	my $secs = tv_interval($since);
	ok(defined $ok, "$what: calls on the dead master's keys succeed again");
	my @other = grep { !/ERROR:\s+08\w{3}: / } @errors;
	is(scalar @other, 0, sprintf('%s: the %d calls that failed meanwhile failed with class 08',
		$what, scalar @errors))
	  or diag "other errors:\n@other";
	return $secs;
}

$node->safe_psql('postgres',
	"SELECT redis_stock_set('$item1', 50); SELECT redis_stock_set('$item2', 50)");
works($idle, "SELECT redis_stock_get('$item1')", '50', 'a session uses the first master');
works($poller, "SELECT redis_stock_get('$item1'), redis_stock_get('$item2')", '50|50',
	'another uses the first two masters');

# --- a master killed after the lock reached its replica
works($holder,
	"BEGIN; SELECT redis_lock_acquire('$k1', 60000), redis_lock_acquire('$k1b', 60000)",
	't|t', 'a transaction holds a lock on the first master and one on the third');
is($cluster->cli($m1, 'WAIT', 1, 1000), '1', 'WAIT: the first master\'s replica acknowledges');
ok(defined wait_until(10, sub { holds($r1, "f:$k1") && holds($r1, "f:$item1") }),
	'the replica has the lock and the item');

my $down = [gettimeofday];
$cluster->kill_master($m1);
my $pg_secs = poll_until_served($item1, $down, 'first master killed');
my $secs = $cluster->wait_for_failover($m1);
ok(1, sprintf('first master killed: the cluster promoted its replica after %.1f s,'
	  . ' PostgreSQL was served after %.1f s', $secs, $pg_secs));
diag sprintf 'failover after a killed master (lock replicated): cluster %.1f s, PostgreSQL %.1f s',
  $secs, $pg_secs;

works($idle, "SELECT redis_stock_get('$item1')", '50',
	'the session that used the dead master is served at its first call');
works($idle, "SELECT redis_stock_decr('$item1', 1)", '49', 'and decrements');
works($idle, "BEGIN; SELECT redis_lock_acquire('${k1}x', 60000); COMMIT", 't', 'and locks');
($out, $err) = session_query($idle,
	"SELECT endpoint, connected FROM redis_server_nodes() WHERE role = 'master'"
	  . " AND $first1 = ANY (SELECT split_part(r, '-', 1)::int FROM unnest(string_to_array(slots, ',')) r)");
is("$out$err", "127.0.0.1:$r1|t", 'redis_server_nodes() shows the promoted replica serving the slots');

works($holder, 'COMMIT', '', 'the transaction with the replicated lock commits');
is(join(' ', $cluster->command($r1, 'EXISTS', "f:$k1"), $cluster->command($m3, 'EXISTS', "f:$k1b")),
	'0 0', 'and its locks are released, on the new master and on the third');

# --- a master killed before the lock reached its replica
works($holder,
	"SELECT redis_stock_get('$item2'); BEGIN; SELECT redis_lock_acquire('$k2b', 60000)",
	"50\nt", 'a transaction holds a lock on the third master, and uses the second');
$cluster->pause_node($r2);
is($cluster->command($m2, 'CLIENT', 'KILL', 'TYPE', 'replica'), '1',
	'the second master\'s replica is stopped, and its link closed by the master');
ok( defined wait_until(
		10, sub { RedisTopology::fields($cluster->command($m2, 'INFO', 'replication'))->{connected_slaves} eq '0' }),
	'the second master has no replica connected');
works($holder, "SELECT redis_lock_acquire('$k2', 60000)", 't', 'the transaction locks a key on the second master');
like($cluster->command($m2, 'GET', "f:$k2") // 'nil', qr/^pg:/, 'which holds it');

$down = [gettimeofday];
$cluster->kill_master($m2);
$cluster->resume_node($r2);
$pg_secs = poll_until_served($item2, $down, 'second master killed');
$secs = $cluster->wait_for_failover($m2);
ok(1, sprintf('second master killed: the cluster promoted its replica after %.1f s,'
	  . ' PostgreSQL was served after %.1f s', $secs, $pg_secs));
diag sprintf 'failover after a killed master (replica stopped 1st): cluster %.1f s, PostgreSQL %.1f s',
  $secs, $pg_secs;
is($cluster->master_for_key("f:$k2"), $r2, 'the replica serves the slots');
is($cluster->command($r2, 'EXISTS', "f:$k2"), '0', 'without the lock');

($out, $err) = session_query($holder, 'COMMIT');
like($err, qr/ERROR:\s+40001: .*"\Q$k2\E"/, 'the commit fails with 40001 naming the lost lock');
is($cluster->command($m3, 'EXISTS', "f:$k2b"), '0', 'the other lock is released at the abort');
works($holder, "SELECT redis_stock_get('$item2')", '50', 'the session goes on');
works($holder, "BEGIN; SELECT redis_lock_acquire('$k2', 60000); COMMIT", 't',
	'and takes the lost key on the new master');
is($cluster->command($r2, 'EXISTS', "f:$k2"), '0', 'and releases it');
diag sprintf 'whole test took %d s', time - $t0;

$_->quit foreach ($holder, $idle, $poller);
$node->stop;

done_testing();
