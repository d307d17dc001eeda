# Transaction ends that involve several Redis servers wait for all of them
# at once: each server sits behind a proxy that delays every reply by 0.3 s,
# a transaction holds a lock on each, and its COMMIT costs one delay
# without the check before commit (two with it, check then release), and
# its ROLLBACK one: the slowest server's round trip, not the sum over the
# servers.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DelayProxy;
use RedisLockTest qw(session_query);

my $delay = 0.3;
my @redis = (RedisLockTest->start_redis(), RedisLockTest->start_redis());
# The proxies are forked before PostgreSQL starts, so that they hold none of it.
my @proxy = map { DelayProxy->start($_->port, $delay) } @redis;
my $node = RedisLockTest->new_node('servers', $redis[0]);
my ($port_a, $port_b) = map { $_->port } @proxy;
$node->safe_psql(
	'postgres', qq{
	CREATE SERVER a FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$port_a');
	CREATE SERVER b FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$port_b');
	GRANT USAGE ON FOREIGN SERVER a, b TO PUBLIC;
});

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
session_query($s, 'SET redislock.command_timeout = 5000');
my ($out, $err, $secs);

# Both servers are reached through their proxy, and connected.
foreach my $server ('a', 'b')
{
	session_query($s, "SET redislock.server = $server");
	session_query($s, "SELECT redis_stock_get('warm')");
	($out, $err, $secs) = session_query($s, "SELECT redis_stock_get('warm')");
	is($err, '', "server $server answers");
	cmp_ok($secs, '>=', $delay, "server $server answers through the slow proxy");
}

# Begin a transaction holding lock $key on server a and on server b.
sub lock_both
{
	my ($key) = @_;
	session_query($s, 'BEGIN');
	my $taken = 0;
	foreach my $server ('a', 'b')
	{
		session_query($s, "SET redislock.server = $server");
		$taken++
		  if (session_query($s, "SELECT redis_lock_acquire('$key', 30000)"))[0] eq 't';
	}
	is($taken, 2, "transaction holds lock $key on both servers");
	return;
}

# Is $key gone from both Redis servers?
sub gone_from_both
{
	my ($key) = @_;
	return (grep { $_->cli('EXISTS', $key) eq '0' } @redis) == 2;
}

# Run each kind of end once untimed first, so that Redis has every script
# cached and no NOSCRIPT round trip counts.
foreach my $end ('ROLLBACK', 'COMMIT')
{
	lock_both('warm');
	session_query($s, $end);
}

# --- COMMIT without the check: the two releases cost one round trip
session_query($s, 'SET redislock.verify_before_commit = off');
lock_both('c1');
($out, $err, $secs) = session_query($s, 'COMMIT');
is($err, '', 'COMMIT without the check succeeds');
cmp_ok($secs, '<', 0.55, 'in about one slow round trip (both servers at once)');
ok(gone_from_both('c1'), 'and releases the lock on both servers');

# --- COMMIT with the check: check, then release, each on both at once
session_query($s, 'RESET redislock.verify_before_commit');
lock_both('c2');
($out, $err, $secs) = session_query($s, 'COMMIT');
is($err, '', 'COMMIT with the check succeeds');
cmp_ok($secs, '>=', 2 * $delay, 'after the check and the release');
cmp_ok($secs, '<', 1.1, 'in about two slow round trips, not four');
ok(gone_from_both('c2'), 'and releases the lock on both servers');

# --- ROLLBACK
lock_both('c3');
($out, $err, $secs) = session_query($s, 'ROLLBACK');
is($err, '', 'ROLLBACK succeeds');
cmp_ok($secs, '<', 0.55, 'in about one slow round trip');
ok(gone_from_both('c3'), 'and releases the lock on both servers');

$s->quit;
$node->stop;
$_->stop foreach @proxy;
$_->stop foreach @redis;

done_testing();
