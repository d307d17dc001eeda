# Fair order among the local waiters of a lock, with redislock preloaded:
# waiters are granted in the order they started waiting, one that is
# cancelled or terminated does not delay those behind it, a release hands
# the lock to the next local waiter at once, a local holder whose lease ran
# out no longer blocks, a foreign holder is polled for by the first local
# waiter only, a session that released and asks again queues behind the
# others, and only the first in line makes Redis calls, behind a local
# holder as behind a foreign one; statement_timeout and lock_timeout end a
# wait in line, and a try fails there.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RedisLockTest qw(session_query start_query finish_query wait_until
  session works terminate_backend);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('wake_fifo', $redis,
	conf => "shared_preload_libraries = 'redislock'\n"
	  . "redislock.recover_interval = 0");
$node->safe_psql(
	'postgres', q{
	CREATE TABLE grants (key text, n bigint, who text, at float8);
	CREATE SEQUENCE grant_order;
});

my $viewer = session($node);
my $holder = session($node);
my ($holder_pid) = session_query($holder, 'SELECT pg_backend_pid()');
my (@waiters, @pids);
for my $i (0 .. 9)
{
	$waiters[$i] = session($node);
	($pids[$i]) = session_query($waiters[$i], 'SELECT pg_backend_pid()');
}

# The transaction of a waiter named $who: wait for $key, note when and in
# which order it was granted, hold it for $hold seconds, commit.
sub waiter_sql
{
	my ($key, $who, $hold) = @_;
	return qq{
	BEGIN;
	SELECT redis_lock_acquire('$key', 60000, 30000);
	INSERT INTO grants
		 VALUES ('$key', nextval('grant_order'), '$who',
				 extract(epoch FROM clock_timestamp()));
	SELECT pg_sleep($hold);
	COMMIT};
}

# Start waiter $i on $key and wait until it shows as waiting.
sub queue_waiter
{
	my ($i, $key, $hold) = @_;
	start_query($waiters[$i], waiter_sql($key, "w$i", $hold));
	return defined wait_until(
		10,
		sub {
			(session_query($viewer,
				"SELECT count(*) FROM redis_locks() WHERE pid = $pids[$i] AND NOT granted"
			))[0] eq '1';
		});
}

# Start waiters @$list on $key, one after the other is seen waiting.
sub queue_waiters
{
	my ($key, $hold, @list) = @_;
	my $queued = 0;
	$queued += queue_waiter($_, $key, $hold) for @list;
	return $queued;
}

# The waiters of $key granted, in the order they were
sub grant_order
{
	my ($key) = @_;
	return (session_query($viewer,
		"SELECT string_agg(who, ',' ORDER BY n) FROM grants WHERE key = '$key'"))[0];
}

# When each waiter of $key was granted, by name
sub grant_times
{
	my ($key) = @_;
	my %at;
	for my $row (split /\n/,
		(session_query($viewer, "SELECT who, at FROM grants WHERE key = '$key'"))[0])
	{
		my ($who, $at) = split /\|/, $row;
		$at{$who} = $at;
	}
	return %at;
}

# The holder takes $key in a transaction
sub hold
{
	my ($key, $ttl) = @_;
	works($holder, "BEGIN; SELECT redis_lock_acquire('$key', $ttl)",
		't', "the holder takes $key");
}

# The holder commits; returns the time just before its commit
sub commit_holder
{
	my ($out, $err) = session_query($holder,
		'SELECT extract(epoch FROM clock_timestamp()); COMMIT');
	is($err, '', 'the holder commits');
	return $out;
}

# Finish the queries of waiters @list; true when each was granted
sub finish_waiters
{
	my $granted = 0;
	for my $i (@_)
	{
		my ($out, $err) = finish_query($waiters[$i], 60);
		$granted++ if $out =~ /^t$/m && $err eq '';
	}
	return $granted;
}

# FIFO: ten waiters are granted in the order they came
hold('fifo', 60000);
is(queue_waiters('fifo', 0.01, 0 .. 9), 10, 'ten waiters queue one after the other');
# its entry is claimed just before it sleeps: give it a moment to get there
ok( defined wait_until(
		5,
		sub {
			(session_query($viewer,
				"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $pids[9]"
			))[0] eq 'Extension';
		}),
	'the last one shows its wait in pg_stat_activity');
commit_holder();
is(finish_waiters(0 .. 9), 10, 'each gets the lock');
is(grant_order('fifo'), join(',', map { "w$_" } 0 .. 9),
	'in the order they started waiting');

# a waiter cancelled and another terminated in the middle of the queue
hold('middle', 60000);
is(queue_waiters('middle', 0.01, 0 .. 4), 5, 'five waiters queue');
is($node->safe_psql('postgres', "SELECT pg_cancel_backend($pids[1])"),
	't', 'the second is cancelled');
my ($out, $err) = finish_query($waiters[1], 20);
like($err, qr/57014/, 'and its wait ends');
ok(terminate_backend($node, $pids[2]), 'the third is terminated');
ok( defined wait_until(
		10,
		sub {
			(session_query($viewer,
				"SELECT count(*) FROM redis_locks() WHERE pid IN ($pids[1], $pids[2])"))[0]
			  eq '0';
		}),
	'both leave the queue');
my $released = commit_holder();
is(finish_waiters(0, 3, 4), 3, 'the others get the lock');
is(grant_order('middle'), 'w0,w3,w4', 'in their order');
my %at = grant_times('middle');
my @gaps = (
	$at{w0} - $released,
	$at{w3} - $at{w0} - 0.01,
	$at{w4} - $at{w3} - 0.01);
diag sprintf('grants after the release, and after the previous holder\'s hold: %.1f, %.1f, %.1f ms',
	map { $_ * 1000 } @gaps);
ok((!grep { $_ > 0.1 } @gaps),
	'each within 100 ms of the previous holder\'s end');
$waiters[2] = session($node);
($pids[2]) = session_query($waiters[2], 'SELECT pg_backend_pid()');

# the hand-off from a local holder to the first local waiter
my @handoffs;
for my $round (1 .. 9)
{
	hold('handoff', 60000);
	start_query($waiters[0],
		"SELECT redis_lock_acquire('handoff', 60000, 30000), extract(epoch FROM clock_timestamp())");
	wait_until(
		10,
		sub {
			(session_query($viewer,
				"SELECT count(*) FROM redis_locks() WHERE pid = $pids[0] AND NOT granted"
			))[0] eq '1';
		});
	usleep(300_000);			# as long as a wait that backs off to 50 ms
	$released = commit_holder();
	($out, $err) = finish_query($waiters[0], 60);
	my ($granted, $granted_at) = split /\|/, $out;
	push @handoffs, ($granted eq 't' ? $granted_at - $released : 1e9) * 1000;
}
@handoffs = sort { $a <=> $b } @handoffs;
diag sprintf('hand-offs (ms): %s', join(', ', map { sprintf '%.1f', $_ } @handoffs));
cmp_ok($handoffs[4], '<', 10, 'the median hand-off takes less than 10 ms');

# a local holder whose lease ran out, with nobody releasing it (and the
# lease watchdog told not to renew it)
session_query($holder, 'SET redislock.lease_renewal = off');
my $start = time;
hold('lapse', 1000);
is(queue_waiter(0, 'lapse', 0), 1, 'a waiter queues behind it');
is(finish_waiters(0), 1, 'and gets the lock');
my $waited = time - $start;
diag sprintf('granted %.2f s after the holder took a lease of 1 s', $waited);
cmp_ok($waited, '<', 5, 'once the holder\'s lease ran out');
($out, $err) = session_query($holder, 'COMMIT');
like($err, qr/40001/, 'the holder finds its lease lost at commit');
session_query($holder, 'RESET redislock.lease_renewal');

# Redis clients that sent a script within the last second
sub pollers
{
	return scalar grep { /\bidle=0\b/ && /\bcmd=evalsha\b/ }
	  split /\n/, $redis->cli('CLIENT', 'LIST');
}

# a foreign holder: the first local waiter polls, the others stay queued
is($redis->cli('SET', 'foreign', 'another-client', 'NX', 'PX', '60000'),
	'OK', 'another client takes a lock');
is(queue_waiters('foreign', 0.01, 0 .. 3), 4, 'four local waiters queue');
usleep(1_200_000);
ok(defined wait_until(5, sub { pollers() == 1 }), 'only one of them asks Redis');
is($node->safe_psql('postgres', "SELECT pg_cancel_backend($pids[0])"),
	't', 'the one that asks is cancelled');
($out, $err) = finish_query($waiters[0], 20);
like($err, qr/57014/, 'and its wait ends');
ok(defined wait_until(5, sub { pollers() == 1 }),
	'the next one asks Redis in its place');
my $deleted = time;
is($redis->cli('DEL', 'foreign'), '1', 'the other client releases');
is(finish_waiters(1 .. 3), 3, 'the local waiters get the lock');
is(grant_order('foreign'), 'w1,w2,w3', 'in their order');
%at = grant_times('foreign');
diag sprintf('granted %.1f ms after the other client\'s release',
	($at{w1} - $deleted) * 1000);
ok($at{w1} > $deleted && $at{w1} - $deleted < 1,
	'the first soon after the other client\'s release');

# a session that released and asks again queues behind the others
hold('again', 60000);
is(queue_waiters('again', 0.01, 0, 1), 2, 'two waiters queue');
start_query($holder, 'COMMIT; ' . waiter_sql('again', 'holder', 0));
is(finish_waiters(0, 1), 2, 'the waiters get the lock');
($out, $err) = finish_query($holder, 60);
like($out, qr/^t$/m, 'and so does the holder that asked again');
is(grant_order('again'), 'w0,w1,holder', 'after them');

# only the first in line asks Redis, behind a local holder as behind a
# foreign one: Redis, not the local holder, says when the lock is free
hold('calls', 60000);
is(queue_waiters('calls', 0.01, 0 .. 7), 8, 'eight waiters queue');
usleep(1_200_000);
ok(defined wait_until(5, sub { pollers() == 1 }),
	'behind a local holder only the first in line asks Redis');
($out, $err) = session_query($waiters[8],
	"SET statement_timeout = 200; SELECT redis_lock_acquire('calls', 60000, -1)");
like($err, qr/57014: canceling statement due to statement timeout/,
	'statement_timeout ends a wait in line');
($out, $err) = session_query($waiters[8],
	"SET statement_timeout = 0; SET lock_timeout = 200; SELECT redis_lock_acquire('calls', 60000, -1)");
like($err, qr/55P03: canceling statement due to lock timeout/,
	'and so does lock_timeout');
works($waiters[8], "RESET lock_timeout; SELECT redis_lock_acquire('calls', 60000, 0)",
	'f', 'a try with others in line fails');
commit_holder();
is(finish_waiters(0 .. 7), 8, 'after the release each gets the lock');
is(grant_order('calls'), join(',', map { "w$_" } 0 .. 7), 'in their order');

$_->quit for @waiters;
$holder->quit;
$viewer->quit;
$node->stop;
$redis->stop;

done_testing();
