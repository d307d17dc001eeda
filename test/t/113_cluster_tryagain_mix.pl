# The check before commit (verify_before_commit on) extends two
# transaction locks of a Redis Cluster in one round trip, with a
# command_timeout (20 ms) that leaves no time for the pause before a call
# answered TRYAGAIN is sent again.  Lock A's slot is being migrated, its
# key on the source and its fencing token already on the target, so the
# source answers its extend (a script on both keys) TRYAGAIN.  Lock B,
# taken first and so checked first, needs no pause, only another node:
# - its slot moved to another master (the session's map is stale): the
#   old master answers MOVED, and the extend is sent where that says;
# - its master was killed and its replica promoted: the connection is
#   refused, and the extend is sent to the master the new slot map names.
# Each time the commit fails with A's TRYAGAIN (class 08), not with
# anything about B, whose extend went out again and succeeded; the backend
# survives (a call left without a node would crash it) and the abort
# releases both locks, B on its new master.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisCluster;
use RedisClusterTest qw(new_cluster_node session works user_key_on);
use RedisLockTest qw(session_query wait_until key_slot);

my $t0 = time;
my $cluster = RedisCluster->start_cluster(masters => 3, replicas => 1, node_timeout => 1000);
diag sprintf 'cluster of 6 nodes up in %d s', time - $t0;
my ($ma, $mb, $mc) = $cluster->masters;

my $node = new_cluster_node(
	'tryagain', $cluster,
	key_prefix => 't:',
	conf       => 'restart_after_crash = on',
	sql        => 'ALTER DATABASE postgres SET redislock.verify_before_commit = on');

my $s = session($node);
my ($pid) = session_query($s, 'SELECT pg_backend_pid()');
my ($out, $err);

# Whether the node on $port holds Redis key $key (SCAN, also on a replica).
sub holds
{
	my ($port, $key) = @_;
	return scalar grep { $_ eq $key } $cluster->node($port)->keys($key);
}

# Open the migration of user key $key's slot from $from to $to and move its
# fencing token only: the source keeps the lock key and answers TRYAGAIN
# to a script on both.
sub split_keys
{
	my ($key, $from, $to) = @_;
	my $fence = $cluster->node($from)->sibling('t:', 'fence', $key)
	  // die "no fencing token for $key";
	$cluster->begin_migration(key_slot("t:$key"), $from, $to);
	$cluster->command_ok($from, 'MIGRATE', '127.0.0.1', $to, '', 0, 5000, 'KEYS', $fence);
	is($cluster->command($from, 'EVAL', "return redis.call('EXISTS', KEYS[1], KEYS[2])",
			2, "t:$key", $fence),
		'TRYAGAIN Multiple keys request during rehashing of slot',
		"the source of $key answers TRYAGAIN to a script on its two keys");
	return;
}

# COMMIT under a command_timeout of 20 ms; check that it fails with the
# TRYAGAIN of lock $key_a, says nothing of lock $key_b, and that the
# backend is still there.
sub commit_fails_on
{
	my ($key_a, $key_b, $what) = @_;
	session_query($s, 'SET redislock.command_timeout = 20');
	($out, $err) = eval { session_query($s, 'COMMIT') };
	my $died = $@;
	my ($rc, $count) = $node->psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid");
	is($count, '1', "$what: the backend survives the commit")
	  or diag "the session ended: $died";
	like($err // '', qr/ERROR:\s+08\w{3}: Redis command on key "\Q$key_a\E" of server "rc" failed with TRYAGAIN/,
		"$what: the commit fails with the TRYAGAIN of $key_a");
	unlike($err // '', qr/"\Q$key_b\E"|MOVED|could not connect|unexpected Redis reply|did not answer/,
		"$what: and with nothing about lock $key_b")
	  or diag $err;
	return !$died && $count eq '1';
}

# --- B's slot moved to another master
my $a1 = user_key_on($cluster, $ma, 't:', 'a');
my $b1 = user_key_on($cluster, $mb, 't:', 'b');
works($s,
	"BEGIN; SELECT redis_lock_acquire('$b1', 60000); SELECT redis_lock_acquire('$a1', 60000)",
	"t\nt", 'lock B on one master, then lock A on another');
$cluster->migrate_slot(key_slot("t:$b1"), $mb, $mc);
ok(holds($mc, "t:$b1"), "B's slot and key moved to another master");
split_keys($a1, $ma, $mb);
commit_fails_on($a1, $b1, 'B moved');
ok(defined wait_until(5, sub { !holds($mc, "t:$b1") }),
	'the abort released B on the master that took its slot');
ok(!holds($ma, "t:$a1"), 'and A on the source');
session_query($s, 'RESET redislock.command_timeout');
$cluster->finish_migration(key_slot("t:$a1"), $ma, $mb);

# --- B's master killed, its replica promoted
my $a2 = user_key_on($cluster, $ma, 't:', 'c');
my $b2 = user_key_on($cluster, $mc, 't:', 'd');
my ($rep) = $cluster->replicas_of($mc);
works($s,
	"BEGIN; SELECT redis_lock_acquire('$b2', 60000); SELECT redis_lock_acquire('$a2', 60000)",
	"t\nt", 'lock B on a master, then lock A on another');
ok(defined wait_until(10, sub { holds($rep, "t:$b2") }), "B reached the replica of B's master");
$cluster->kill_master($mc);
diag sprintf "B's master promoted %.1f s after it was killed", $cluster->wait_for_failover($mc);
split_keys($a2, $ma, $mb);
if (commit_fails_on($a2, $b2, 'B rerouted'))
{
	ok(defined wait_until(5, sub { !holds($rep, "t:$b2") }),
		'the abort released B on the promoted replica');
	ok(!holds($ma, "t:$a2"), 'and A on the source');
	works($s, "RESET redislock.command_timeout; SELECT redis_lock_acquire_session('$b2', 60000)", 't',
		'the session goes on, on the new master');
	works($s, "SELECT redis_lock_release('$b2')", 't', 'and releases what it took');
	$s->quit;
}
else
{
	fail('the abort released B on the promoted replica');
}
diag sprintf 'whole test took %d s', time - $t0;

$node->stop;

done_testing();
