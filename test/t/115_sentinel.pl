# Sentinel servers, on a master with 2 replicas watched by 3 Sentinels, the
# data nodes and the Sentinels each with a password of their own.
# - Options: "sentinel" needs "sentinel_master" and excludes host, port,
#   unix_socket and cluster; malformed lists are refused; the Sentinels'
#   credentials (sentinel_username, sentinel_password) belong to user
#   mappings, not servers, are hidden like "password", reach the Sentinels
#   only (the data nodes never see a failed AUTH), and sentinel_username is
#   used (an ACL user of the Sentinels).
# - Locks and stock work on the master the Sentinels give, and
#   redis_server_nodes lists the Sentinels and that master.
# - SENTINEL FAILOVER: the old master still takes writes for seconds, yet a
#   new transaction 1.5 s after the failover works on the new master; a
#   session whose connection is to the old master, made a replica, does not
#   see READONLY.
# - A killed master: once a replica is promoted, the next calls of a session
#   that used the dead master succeed on the new one, and a session whose
#   old master came back as a replica is rerouted without READONLY.
# The failover times measured are reported.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use RedisSentinel;
use RedisLockTest qw(session_query wait_until);

my $t0 = time;
my $group = RedisSentinel->start_sentinel_group(
	replicas          => 2,
	sentinels         => 3,
	down_after        => 1000,
	failover_timeout  => 5000,
	password          => 'pw',
	sentinel_password => 'spw');
my $sentinels = $group->sentinels;
my $mname = $group->master_name;
my $first = $group->master_port;
diag sprintf 'master, 2 replicas and 3 sentinels up in %d s', time - $t0;

my $node = RedisLockTest->new_node('sentinel', $group->node($first));
$node->safe_psql(
	'postgres', qq{
	CREATE SERVER ha FOREIGN DATA WRAPPER redislock
		OPTIONS (sentinel '$sentinels', sentinel_master '$mname', key_prefix 'ha:');
	CREATE USER MAPPING FOR PUBLIC SERVER ha
		OPTIONS (password 'pw', sentinel_password 'spw');
	GRANT USAGE ON FOREIGN SERVER ha TO PUBLIC;
	CREATE ROLE plain;
});

# Two sessions on server ha; $other is used now and then left alone until its
# master has changed.
my ($s, $other) = map {
	my $session = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
	$session->set_query_timer_restart;
	session_query($session, '\set VERBOSITY verbose');
	session_query($session, 'SET redislock.server = ha');
	$session;
} 1 .. 2;
my ($pid) = session_query($s, 'SELECT pg_backend_pid()');
my ($opid) = session_query($other, 'SELECT pg_backend_pid()');
my ($out, $err, $secs);

# The value of key ha:$key on the data node on $port (undef if absent).
sub value_on
{
	my ($port, $key) = @_;
	return $group->command($port, 'GET', "ha:$key");
}

# Whether the data nodes on @ports all hold $value in ha:$key, within 30 s.
sub replicated
{
	my ($key, $value, @ports) = @_;
	return defined wait_until(30,
		sub { !grep { (value_on($_, $key) // '') ne $value } @ports });
}

# An owner token of backend $p.
sub token_of
{
	my ($p) = @_;
	return qr/\Apg:.*:$p:[0-9]+:[0-9a-f]{32}\z/;
}

# The master and the Sentinels, as redis_server_nodes($arg) gives them.
sub listed_nodes
{
	my ($arg) = @_;
	($out, $err) = session_query($s,
		"SELECT n FROM (SELECT role || ' ' || endpoint AS n FROM redis_server_nodes($arg) "
		  . "WHERE role IN ('master', 'sentinel')) AS nodes ORDER BY n COLLATE \"C\"");
	return "$out$err";
}

sub expected_nodes
{
	my ($master) = @_;
	return join "\n", "master 127.0.0.1:$master",
	  map { "sentinel 127.0.0.1:$_" } sort { $a <=> $b } $group->sentinel_ports;
}

# --- options
my $ok_opts = "sentinel '$sentinels', sentinel_master '$mname'";
my ($sentinel1) = $group->sentinel_ports;
my @refused = (
	[ "sentinel '$sentinels'",       qr/sentinel_master/, 'sentinel without sentinel_master' ],
	[ "sentinel_master '$mname'",    qr/sentinel/,        'sentinel_master without sentinel' ],
	[ "$ok_opts, host '127.0.0.1'",  qr/\bhost\b/,        'sentinel with host' ],
	[ "$ok_opts, port '$first'",     qr/\bport\b/,        'sentinel with port' ],
	[ "$ok_opts, unix_socket '/tmp/redis.sock'", qr/unix_socket/, 'sentinel with unix_socket' ],
	[ "$ok_opts, cluster '127.0.0.1:$first'",    qr/cluster/,     'sentinel with cluster' ],
	[ "sentinel '127.0.0.1', sentinel_master '$mname'", qr/sentinel/, 'an entry without a port' ],
	[ "sentinel '127.0.0.1:$sentinel1, 127.0.0.1:0', sentinel_master '$mname'",
		qr/sentinel/, 'an entry with port 0' ],
	[ "sentinel '127.0.0.1:$sentinel1, localhost:x', sentinel_master '$mname'",
		qr/sentinel/, 'an entry with a port that is no number' ],
	[ "sentinel '', sentinel_master '$mname'", qr/sentinel/, 'an empty list' ],
	[ "$ok_opts, sentinel_password 'spw'", qr/invalid option "sentinel_password"/,
		'sentinel_password as a server option' ],
	[ "$ok_opts, sentinel_username 'u'", qr/invalid option "sentinel_username"/,
		'sentinel_username as a server option' ]);
foreach my $case (@refused)
{
	my ($opts, $re, $what) = @$case;
	($out, $err) = session_query($s,
		"CREATE SERVER bad FOREIGN DATA WRAPPER redislock OPTIONS ($opts)");
	like($err, qr/ERROR:\s+\w{5}: [^\n]*$re/, "refused: $what");
}
($out) = session_query($s, "SELECT count(*) FROM pg_foreign_server WHERE srvname = 'bad'");
is($out, '0', 'no such server was created');
foreach my $alter ("ADD host '127.0.0.1'", 'DROP sentinel_master',
	"ADD cluster '127.0.0.1:$first'", "SET sentinel '127.0.0.1'")
{
	($out, $err) = session_query($s, "ALTER SERVER ha OPTIONS ($alter)");
	like($err, qr/ERROR:\s+\w{5}: /, "ALTER SERVER ha OPTIONS ($alter) refused");
}
($out, $err) = session_query($s,
	"CREATE USER MAPPING FOR plain SERVER ha OPTIONS (sentinel_master '$mname')");
like($err, qr/ERROR:\s+\w{5}: invalid option "sentinel_master"/,
	'sentinel_master is no user mapping option');

($out) = session_query($s,
	"SELECT array_to_string(umoptions, ',') FROM pg_user_mappings WHERE srvname = 'ha'");
is($out, 'password=pw,sentinel_password=spw', 'the owner sees the mapping\'s options');
session_query($s, 'SET ROLE plain');
($out, $err) = session_query($s,
	"SELECT coalesce(array_to_string(umoptions, ','), 'hidden') "
	  . "FROM pg_user_mappings WHERE srvname = 'ha'");
is("$out$err", 'hidden', 'a user with USAGE on the server does not');
session_query($s, 'RESET ROLE');

# --- locks and stock on the master
($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('a', 30000)");
is("$out$err", 't', 'a session lock is taken through the Sentinels');
like(value_on($first, 'a') // 'nil', token_of($pid), 'on the master, with the backend\'s token');
($out, $err) = session_query($s, "SELECT redis_lock_release('a')");
is("$out$err", 't', 'and released');
is(value_on($first, 'a'), undef, 'which removes it from the master');

session_query($s, 'BEGIN');
($out, $err) = session_query($s, "SELECT redis_lock_acquire('t', 30000)");
is("$out$err", 't', 'a transaction lock is taken');
like(value_on($first, 't') // 'nil', token_of($pid), 'on the master');
($out, $err) = session_query($s, 'COMMIT');
is($err, '', 'COMMIT checks and releases it without a message');
is(value_on($first, 't'), undef, 'and it is gone');

($out, $err) = session_query($s,
	"SELECT redis_stock_set('item', 10); SELECT redis_stock_decr('item', 3, 'alice')");
is("$out$err", "\n7", 'stock set and decremented');
is(value_on($first, 'item'), '7', 'on the master');
($out, $err) = session_query($other, "SELECT redis_stock_get('item')");
is("$out$err", '7', 'the second session reads it');

is(listed_nodes("'ha'"), expected_nodes($first),
	'redis_server_nodes lists the Sentinels and the master');
is(listed_nodes(''), expected_nodes($first), 'also for the current server');
($out, $err) = session_query($s,
	"SELECT connected FROM redis_server_nodes('ha') WHERE role = 'master'");
is("$out$err", 't', 'the master is connected');

# --- an ACL user of the Sentinels (sentinel_username)
foreach my $port ($group->sentinel_ports)
{
	$group->command_ok($port, 'ACL', 'SETUSER', 'watcher', 'on', '>wpw', '+@all',
		'allchannels');
}
$node->safe_psql(
	'postgres', qq{
	CREATE SERVER ha_acl FOREIGN DATA WRAPPER redislock
		OPTIONS (sentinel '$sentinels', sentinel_master '$mname', key_prefix 'ha:');
	GRANT USAGE ON FOREIGN SERVER ha_acl TO PUBLIC;
	CREATE USER MAPPING FOR PUBLIC SERVER ha_acl
		OPTIONS (password 'pw', sentinel_username 'watcher', sentinel_password 'spw');
});
session_query($s, 'SET redislock.server = ha_acl');
($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('acl', 30000)");
like($err, qr/ERROR:\s+(28|08)\w{3}: /,
	'sentinel_username with the default user\'s password: the Sentinels refuse');
unlike($err, qr/spw|wpw/, 'the error shows no password');
is(value_on($first, 'acl'), undef, 'nothing was locked');
my $acl_log = join ' ', map { @$_ } map { @{ $group->command($_, 'ACL', 'LOG') } }
  $group->sentinel_ports;
like($acl_log, qr/\bwatcher\b/, 'the Sentinels saw user "watcher" try');
$node->safe_psql('postgres',
	"ALTER USER MAPPING FOR PUBLIC SERVER ha_acl OPTIONS (SET sentinel_password 'wpw')");
($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('acl', 30000)");
is("$out$err", 't', 'with its own password the same session takes the lock');
like(value_on($first, 'acl') // 'nil', token_of($pid), 'on the master');
($out, $err) = session_query($s, "SELECT redis_lock_release('acl')");
is("$out$err", 't', 'and releases it');
session_query($s, 'SET redislock.server = ha');

# --- SENTINEL FAILOVER
# Both sessions are connected to the first master, after every catalog
# change that could close their connections.
foreach my $session ($s, $other)
{
	($out, $err) = session_query($session,
		"SELECT redis_stock_get('item'); "
		  . "SELECT valid FROM redis_connections() "
		  . "WHERE server_name = 'ha' AND endpoint = '127.0.0.1:$first'");
	is("$out$err", "7\nt", 'a session reads the stock, connected to the first master');
}
ok(replicated('item', '7', $group->replica_ports), 'both replicas have the stock');
$secs = $group->failover;
my $failover_done = [gettimeofday];
my $second = $group->master_port;
isnt($second, $first, 'SENTINEL FAILOVER gives another master');
ok(1, sprintf('SENTINEL FAILOVER took %.1f s', $secs));
diag sprintf 'SENTINEL FAILOVER took %.1f s', $secs;

usleep(100_000) while tv_interval($failover_done) < 1.5;
session_query($s, 'BEGIN');
($out, $err) = session_query($s,
	"SELECT redis_lock_acquire('f', 30000); SELECT redis_stock_decr('item', 1)");
is("$out$err", "t\n6", 'a new transaction 1.5 s later takes a lock and a unit');
# Read the old master first: if it was made a replica since, it may hold
# the lock by replication.
my $on_old = value_on($first, 'f');
my $old_role = $group->role($first);
like(value_on($second, 'f') // 'nil', token_of($pid), 'the lock is on the new master');
ok(!defined $on_old || $old_role eq 'slave', "the old master (now $old_role) did not get it");
is(value_on($second, 'item'), '6', 'the unit was taken on the new master');
($out, $err) = session_query($s, 'COMMIT');
is($err, '', 'COMMIT succeeds without a message');
is(value_on($second, 'f'), undef, 'and releases the lock on the new master');
is(listed_nodes("'ha'"), expected_nodes($second), 'redis_server_nodes gives the new master');

# The old master is made a replica as a Sentinel would, but without closing
# its clients: $other's connection to it stays open.
$group->command_ok($first, 'REPLICAOF', '127.0.0.1', $second);
is($group->role($first), 'slave', 'the old master is a replica');
ok(replicated('item', '6', grep { $_ != $second } $group->data_ports),
	'both replicas of the new master have the stock');
($out, $err) = session_query($other, "SELECT redis_lock_acquire_session('b1', 30000)");
is("$out$err", 't', 'a session connected to it takes a lock without READONLY');
like(value_on($second, 'b1') // 'nil', token_of($opid), 'on the new master');
($out, $err) = session_query($other, "SELECT redis_lock_release('b1')");
is("$out$err", 't', 'and releases it');

# --- the master killed
($out, $err) = session_query($other, "SELECT redis_stock_get('item')");
is("$out$err", '6', 'the second session uses the master');
my $killed = $group->kill_master;
is($killed, $second, 'the master is killed');
$secs = $group->wait_for_new_master;
my $third = $group->master_port;
ok($third != $second, 'the Sentinels promote a replica');
ok(1, sprintf('promotion after a killed master took %.1f s', $secs));
diag sprintf 'promotion after a killed master took %.1f s', $secs;

my $call_t0 = [gettimeofday];
($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('k', 30000)");
my $call_secs = tv_interval($call_t0);
is("$out$err", 't', 'the next call of a session that used the dead master succeeds');
like(value_on($third, 'k') // 'nil', token_of($pid), 'on the new master');
ok(1, sprintf('that call took %.2f s, %.1f s after the kill', $call_secs,
		$group->seconds_since_down($killed)));
diag sprintf 'first call after the kill took %.2f s', $call_secs;
session_query($s, 'BEGIN');
($out, $err) = session_query($s,
	"SELECT redis_lock_acquire('k2', 30000); SELECT redis_stock_decr('item', 1)");
is("$out$err", "t\n5", 'a transaction takes a lock and a unit');
is(value_on($third, 'item'), '5', 'on the new master');
($out, $err) = session_query($s, 'COMMIT; SELECT redis_lock_release(\'k\')');
is("$out$err", 't', 'COMMIT and the release of the session lock succeed');
is($group->command($third, 'EXISTS', 'ha:k', 'ha:k2'), 0, 'both locks are gone');
is(listed_nodes("'ha'"), expected_nodes($third), 'redis_server_nodes gives the new master');

# --- the dead master back, as a replica
$group->restart_node($killed);
is($group->role($killed), 'slave', 'the killed master came back as a replica');
($out, $err) = session_query($other, "SELECT redis_lock_acquire_session('b2', 30000)");
is("$out$err", 't', 'a session that had a connection to it takes a lock without READONLY');
like(value_on($third, 'b2') // 'nil', token_of($opid), 'on the current master');
($out, $err) = session_query($other,
	"SELECT redis_stock_decr('item', 1); SELECT redis_lock_release('b2')");
is("$out$err", "4\nt", 'decrements and releases there too');
is(value_on($third, 'item'), '4', 'the stock is exact on the current master');

# --- credentials stayed where they belong
foreach my $port (grep { $group->is_up($_) } $group->data_ports)
{
	is_deeply($group->command($port, 'ACL', 'LOG'), [], "data node $port saw no failed AUTH");
}

$_->quit foreach ($s, $other);
$node->stop;
diag sprintf 'whole test took %d s', time - $t0;

done_testing();
