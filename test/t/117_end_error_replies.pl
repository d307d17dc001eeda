# An error reply met while finding where calls go (a Redis ACL refusing
# CLUSTER SLOTS, a Sentinel refusing to name its master) is a WARNING at
# COMMIT and ROLLBACK, never an ERROR: the locks are released where the
# last known map or master says, the server does not restart, and the
# session goes on.  In a SQL call, a Sentinel that refuses is passed over
# for the next one.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisCluster;
use RedisSentinel;
use RedisClusterTest qw(new_cluster_node user_key_on);
use RedisLockTest qw(session_query wait_until);

# --- Redis Cluster: CLUSTER SLOTS refused while the slot map is stale
my $cluster = RedisCluster->start_cluster(masters => 3, replicas => 0, password => 'pw');
my ($m1, $m2) = $cluster->masters;
foreach my $port ($cluster->all_ports)
{
	$cluster->command_ok($port, 'ACL', 'SETUSER', 'app', 'on', '>apppw', '~*', '+@all');
}
my $node = new_cluster_node(
	'end_errors', $cluster,
	seeds => "127.0.0.1:$m1",
	sql   => q{
	CREATE USER MAPPING FOR PUBLIC SERVER rc OPTIONS (username 'app', password 'apppw');
});
my @held = map { user_key_on($cluster, $m1, '', "held_$_") } qw(a b c);
my $read = user_key_on($cluster, $m2, '', 'read');

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
session_query($s, 'SET redislock.verify_before_commit = off; SET redislock.command_timeout = 300');
my ($pid) = session_query($s, 'SELECT pg_backend_pid()');
my ($out, $err);

# Grant or revoke CLUSTER SLOTS to the mapping's ACL user on every node.
sub cluster_slots
{
	my ($rule) = @_;
	$cluster->command_ok($_, 'ACL', 'SETUSER', 'app', "${rule}cluster|slots")
	  foreach $cluster->all_ports;
	return;
}

# CLUSTER SLOTS refused so far, over all nodes.
sub slots_refused
{
	my $refused = 0;
	foreach my $port ($cluster->all_ports)
	{
		my $stats = $cluster->command($port, 'INFO', 'commandstats');
		$refused += $1 if $stats =~ /^cmdstat_cluster\|slots:.*rejected_calls=(\d+)/m;
	}
	return $refused;
}

# In a transaction holding three locks, let a read on the second master
# time out (making the slot map stale) inside a savepoint, refuse CLUSTER
# SLOTS, then end the transaction with $end.
sub cluster_end
{
	my ($end) = @_;
	cluster_slots('+');
	session_query($s, 'BEGIN');
	($out) = session_query($s,
		'SELECT ' . join(' AND ', map { "redis_lock_acquire('$_', 60000)" } @held));
	is($out, 't', "$end: locks taken on the first master");
	session_query($s, 'SAVEPOINT sp');
	session_query($s, "SELECT redis_stock_get('$read')");    # connected
	$cluster->command_ok($m2, 'CLIENT', 'PAUSE', '1000', 'ALL');
	(undef, $err) = session_query($s, "SELECT redis_stock_get('$read')");
	like($err, qr/08006/, "$end: a read on the paused master timed out");
	session_query($s, 'ROLLBACK TO SAVEPOINT sp');
	sleep 1;    # the pause is over: the end meets only the refusal
	cluster_slots('-');
	my $refused = slots_refused();
	($out, $err) = session_query($s, $end);
	like($err, qr/WARNING:  42501: Redis command on key "CLUSTER SLOTS" of server "rc" failed with NOPERM/,
		"$end: the refused CLUSTER SLOTS is a warning");
	unlike($err, qr/ERROR|PANIC/, "$end: and no error");
	$refused = slots_refused() - $refused;
	ok($refused >= 1 && $refused <= 4,
		"$end: the slot map was asked for once for all three releases ($refused refusals)");
	is($cluster->command($m1, 'EXISTS', $_), '0',
		"$end: lock $_ was released where the last map said")
	  foreach @held;
	($out) = session_query($s, 'SELECT pg_backend_pid()');
	is($out, $pid, "$end: the session goes on");
	return;
}

cluster_end('COMMIT');
cluster_end('ROLLBACK');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_stat_activity WHERE pid = ' . $pid),
	'1', 'cluster: the server did not restart');
cluster_slots('+');
$s->quit;
$node->stop;

# --- Sentinel: the Sentinels refuse to name the master
my $group = RedisSentinel->start_sentinel_group(
	replicas          => 1,
	sentinels         => 3,
	password          => 'pw',
	sentinel_password => 'spw');
my @sentinel_ports = $group->sentinel_ports;
my $master = $group->master_port;
$group->command_ok($_, 'ACL', 'SETUSER', 'sapp', 'on', '>sapw', '+@all')
  foreach @sentinel_ports;

my $snode = RedisLockTest->new_node('end_errors_sentinel', $group->node($master));
$snode->safe_psql(
	'postgres', qq{
	CREATE SERVER ha FOREIGN DATA WRAPPER redislock
		OPTIONS (${\$group->server_options});
	CREATE USER MAPPING FOR PUBLIC SERVER ha
		OPTIONS (password 'pw', sentinel_username 'sapp', sentinel_password 'sapw');
	ALTER DATABASE postgres SET redislock.server = ha;
});
$s = $snode->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
session_query($s, 'SET redislock.verify_before_commit = off');
($pid) = session_query($s, 'SELECT pg_backend_pid()');

# Let the Sentinels on @ports refuse SENTINEL commands, the others not.
sub sentinels_refuse
{
	my (@ports) = @_;
	foreach my $port (@sentinel_ports)
	{
		my $rule = (grep { $_ == $port } @ports) ? '-sentinel' : '+sentinel';
		$group->command_ok($port, 'ACL', 'SETUSER', 'sapp', $rule);
	}
	return;
}

# Take a lock, let every Sentinel refuse, wait until the master is due for
# another look, then end the transaction with $end.
sub sentinel_end
{
	my ($end) = @_;
	sentinels_refuse();
	session_query($s, 'BEGIN');
	($out) = session_query($s, "SELECT redis_lock_acquire('s_$end', 60000)");
	is($out, 't', "sentinel $end: lock taken");
	sentinels_refuse(@sentinel_ports);
	session_query($s, 'SELECT pg_sleep(1.2)');
	($out, $err) = session_query($s, $end);
	like($err, qr/WARNING:  08001: no Sentinel of server "ha" named a reachable master/,
		"sentinel $end: no master named is a warning");
	like($err, qr/NOPERM/, "sentinel $end: which says what the Sentinel answered");
	unlike($err, qr/ERROR|PANIC/, "sentinel $end: and no error");
	is($group->command($master, 'EXISTS', "s_$end"), '0',
		"sentinel $end: the lock was released on the last master known");
	return;
}

sentinel_end('COMMIT');
sentinel_end('ROLLBACK');

# Two Sentinels refuse, those asked first (connected ones first); the third
# names the master.
sentinels_refuse(@sentinel_ports[ 0 .. 1 ]);
session_query($s, 'SELECT pg_sleep(1.2)');
($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('s_next', 60000)");
is($out, 't', 'sentinel: a call succeeds through the Sentinel that did not refuse');
is($err, '', 'sentinel: without a message');
($out) = session_query($s, 'SELECT pg_backend_pid()');
is($out, $pid, 'sentinel: the session went on throughout');
sentinels_refuse();
$s->quit;

done_testing();
