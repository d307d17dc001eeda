# A waiter for a Redis lock is woken by the release, on a single Redis,
# without the preload: the release announces itself to one waiter, on a
# channel that the waiter subscribed to before the attempt that queued it,
# so that a release between that attempt and the wait is not missed.  Other
# clients' DEL and expiries wake a waiter through keyspace events when the
# server publishes them, and within the poll bound when it does not.
# Cancel, lock_timeout, statement_timeout and terminate end a subscribed
# wait as they end any other, close its subscription, and the waiter behind
# a cancelled one is woken all the same, and so is the waiter behind one
# that gives up just as a release announces itself to it.
use strict;
use warnings;

use IO::Socket::INET;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use DelayProxy;
use RedisLockTest qw(session_query start_query finish_query wait_for_stderr
  wait_until);
use WakeTest qw(add_server new_session pid_of waits hand_off median);

my $redis = RedisLockTest->start_redis();
# the replies to one session's connections come 0.5 s late
my $proxy = DelayProxy->start($redis->port, 0.5);
my $node = RedisLockTest->new_node('wake', $redis);
add_server($node, 'slow', $proxy->port);

# The Redis clients subscribed to a channel (sharded or not)
sub subscribers
{
	my $n = 0;
	for (split /\n/, $redis->cli('CLIENT', 'LIST'))
	{
		$n++ if /\b(?:sub|ssub)=([1-9])/;
	}
	return $n;
}

# How many times Redis ran a command since its statistics were reset
sub calls_of
{
	my ($command) = @_;
	my ($calls) = $redis->cli('INFO', 'commandstats') =~ /cmdstat_$command:calls=(\d+)/;
	return $calls // 0;
}

# The waiters queued beside a lock key
sub queued
{
	my ($key) = @_;
	my $waiters = $redis->sibling('', 'waiters', $key);
	return defined $waiters ? $redis->cli('LLEN', $waiters) : 0;
}

# --- hand-off: a release wakes the waiter at once
my $holder = new_session($node);
my $waiter = new_session($node);
my @ms;
for (1 .. 7)
{
	my ($granted, $ms) = hand_off($node, $holder, $waiter, 'hot');
	is($granted, 't', "hand-off $_: the waiter got the lock");
	push @ms, $ms;
}
note 'hand-off ms: ' . join(' ', map { sprintf '%.1f', $_ } @ms);
cmp_ok(median(@ms), '<', 10, 'a release wakes the waiter within 10 ms (median of 7)');
is(subscribers(), 1, 'the waiter stays subscribed to its channel between waits');
is(queued('hot'), 0, 'and nobody is left queued');

# --- keyspace events off: a foreign DEL is found by polling, within its bound
$redis->cli('SET', 'hot', 'someone', 'PX', '30000');
start_query($waiter, "SELECT redis_lock_acquire('hot', 30000, 10000)");
waits($node, $waiter);
usleep(300_000);
my $t0 = [gettimeofday];
$redis->cli('DEL', 'hot');
my ($out, $err, $secs) = finish_query($waiter, 10);
is($out, 't', 'keyspace events off: a foreign DEL frees the lock for the waiter');
cmp_ok(tv_interval($t0), '<', 0.5, 'within the poll bound, long before the lease ends');

# a foreign lease that expires bounds the poll too
$redis->cli('SET', 'hot', 'someone', 'PX', '400');
$t0 = [gettimeofday];
($out) = session_query($waiter, "SELECT redis_lock_acquire('hot', 30000, 10000)");
is($out, 't', 'keyspace events off: an expiry frees the lock for the waiter');
cmp_ok(tv_interval($t0), '<', 0.6, 'within the lease and the poll bound');

# --- keyspace events on: new sessions hear them, and poll rarely
is($redis->cli('CONFIG', 'SET', 'notify-keyspace-events', 'Kgx'), 'OK',
	'keyspace events for generic commands and expiries');
$_->quit for ($holder, $waiter);
$holder = new_session($node);
my @waiters = map { new_session($node) } 1 .. 3;

@ms = ();
for (1 .. 5)
{
	$redis->cli('SET', 'ks', 'someone', 'PX', '30000');
	start_query($waiters[0],
		"SELECT redis_lock_acquire('ks', 30000, 10000) AND true, "
		  . "extract(epoch FROM clock_timestamp())");
	waits($node, $waiters[0]);
	usleep(200_000);
	my $t_del = Time::HiRes::time();
	$redis->command('DEL', 'ks');
	($out) = finish_query($waiters[0], 10);
	my ($granted, $t_grant) = split /\|/, $out;
	is($granted, 't', "foreign DEL $_: the waiter got the lock");
	push @ms, 1000 * ($t_grant - $t_del);
}
note 'foreign DEL ms: ' . join(' ', map { sprintf '%.1f', $_ } @ms);
cmp_ok(median(@ms), '<', 10, 'keyspace events on: a foreign DEL wakes the waiter within 10 ms');

@ms = ();
for (1 .. 3)
{
	$redis->cli('SET', 'ks', 'someone', 'PX', '300');
	my $t_expiry = Time::HiRes::time() + 0.3;
	($out) = session_query($waiters[0],
		"SELECT redis_lock_acquire('ks', 30000, 10000) AND true, "
		  . "extract(epoch FROM clock_timestamp())");
	my ($granted, $t_grant) = split /\|/, $out;
	is($granted, 't', "expiry $_: the waiter got the lock");
	push @ms, 1000 * ($t_grant - $t_expiry);
}
note 'expiry ms: ' . join(' ', map { sprintf '%.1f', $_ } @ms);
cmp_ok(median(@ms), '<', 10, 'keyspace events on: an expiry wakes the waiter within 10 ms');

# --- one waiter woken per release
session_query($holder, "SELECT redis_lock_acquire_session('one')");
for my $w (@waiters)
{
	start_query($w, "SELECT redis_lock_acquire_session('one', 30000, 20000)");
	waits($node, $w);
}
# each has subscribed and tried again, and polls no more than once a second
usleep(300_000);
$redis->cli('CONFIG', 'RESETSTAT');
session_query($holder, "SELECT redis_lock_release('one')");
usleep(100_000);
is(calls_of('spublish'), 1, 'one release announced itself once');
is(queued('one'), 2, 'to one waiter: the other two stay queued');
# the release and the woken waiter's attempt; a waiter's poll, once a
# second at most, may add one, where waking all three would add three
cmp_ok(calls_of('evalsha'), '<=', 3, 'one waiter tried again');

# they pass the lock on, one after the other, in the order they queued
for my $i (0 .. 2)
{
	($out) = finish_query($waiters[$i], 5);
	is($out, 't', "waiter $i got the lock in its turn");
	session_query($waiters[$i], "SELECT redis_lock_release('one')");
}
is(queued('one'), 0, 'and left the queue');

# --- a release between the waiter's failed attempt and its wait is heard
# The waiter talks to Redis through the proxy, whose replies come 0.5 s
# late: the holder releases as soon as Redis has run the waiter's attempt
# that queued it, well before that attempt's refusal reaches the waiter.
my $slow = new_session($node, 'slow');
session_query($holder, "SELECT redis_lock_acquire_session('race')");
my $monitor = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $redis->port)
  or die "cannot connect to Redis: $!";
print $monitor "MONITOR\r\n";
<$monitor>;
start_query($slow, "SELECT redis_lock_acquire_session('race', 30000, 20000)");
my ($t_queued, $t_released, $t_granted);
local $SIG{ALRM} = sub { die "no hand-off seen by MONITOR within 30 s\n" };
alarm 30;
while (my $line = <$monitor>)
{
	my ($t) = $line =~ /^\+(\d+\.\d+)/;
	next unless $line =~ /"EVALSHA"/;
	if (!defined $t_queued && $line =~ /"2" "race" .*"\{\d+\}:wake:/)
	{
		$t_queued = $t;
		start_query($holder, "SELECT redis_lock_release('race')");
	}
	elsif (defined $t_queued && !defined $t_released && $line =~ /"1" "race"/)
	{
		$t_released = $t;
	}
	elsif (defined $t_released && $line =~ /"2" "race"/)
	{
		$t_granted = $t;
		last;
	}
}
alarm 0;
close $monitor;
ok(defined $t_released, 'the holder released the lock');
cmp_ok($t_released - $t_queued, '<', 0.4,
	'before the refusal of the attempt that queued the waiter reached it');
($out, $err, $secs) = finish_query($slow, 10);
is($out, 't', 'the waiter got the lock');
# its wake message, then its attempt: one delayed reply after the release,
# where a missed wake-up would leave it sleeping its 1 s poll bound
cmp_ok($t_granted - $t_released, '<', 0.8, 'it tried again as soon as the announcement reached it');
finish_query($holder, 5);
session_query($slow, "SELECT redis_lock_release('race')");

# --- a waiter that gives up passes on a release announced to it
# The holder releases and, in the same statement, cancels the slow waiter,
# first in the queue: the release announces itself to it, and its message
# comes 0.5 s late, after the cancel.  Leaving the queue as its transaction
# ends, the slow waiter wakes the waiter behind it, which would otherwise
# sleep until its next poll, up to a second later.
session_query($holder, "SELECT redis_lock_acquire_session('gone')");
start_query($slow, "SELECT redis_lock_acquire_session('gone', 30000, 20000)");
ok(defined wait_until(5, sub { queued('gone') == 1 }), 'the slow waiter is queued');
start_query($waiters[1],
	"SELECT redis_lock_acquire_session('gone', 30000, 20000) AND true, "
	  . "extract(epoch FROM clock_timestamp())");
ok(defined wait_until(5, sub { queued('gone') == 2 }), 'a second waiter is queued behind it');
$redis->cli('CONFIG', 'RESETSTAT');
my $slow_pid = pid_of($slow);
($out) = session_query($holder,
	"SELECT redis_lock_release('gone') AND pg_cancel_backend($slow_pid), "
	  . "extract(epoch FROM clock_timestamp())");
my ($cancelled, $t_cancel) = split /\|/, $out;
is($cancelled, 't', 'the holder released the lock and cancelled the slow waiter');
ok(defined wait_for_stderr($slow, qr/57014: canceling statement due to user request/, 5),
	'the slow waiter is cancelled');
finish_query($slow, 5);
($out) = finish_query($waiters[1], 5);
my ($granted, $t_grant) = split /\|/, $out;
is($granted, 't', 'the waiter behind it got the lock');
is(calls_of('spublish'), 2,
	'the release announced itself to the slow waiter, and its leaving to the next');
cmp_ok($t_grant - $t_cancel, '<', 0.3, 'which took the lock as the slow waiter left');
is(queued('gone'), 0, 'nobody is left queued');

# a waiter whose wait_ms runs out leaves the queue at once
start_query($slow, "SELECT redis_lock_acquire_session('gone', 30000, 1500)");
ok(defined wait_until(5, sub { queued('gone') == 1 }), 'the slow waiter is queued');
($out) = finish_query($slow, 5);
is($out, 'f', 'until its wait_ms runs out');
is(queued('gone'), 0, 'and then leaves the queue');
session_query($waiters[1], "SELECT redis_lock_release('gone')");

# --- no barging: the lock that a release handed to a woken waiter is
# refused to others, the releasing session first, until the waiter comes
# The holder releases and asks for the lock again in the same statement, as
# a busy session does; the waiter queued before it gets the lock first.
session_query($holder, "SELECT redis_lock_acquire_session('turn')");
start_query($waiters[0], "SELECT redis_lock_acquire_session('turn', 30000, 20000)");
ok(defined wait_until(5, sub { queued('turn') == 1 }), 'a waiter is queued');
start_query($holder,
	"SELECT redis_lock_release('turn') AND redis_lock_acquire_session('turn', 30000, 20000)");
($out) = eval { finish_query($waiters[0], 3) };
is($out, 't', 'the woken waiter got the lock, ahead of the releasing session');
ok(!defined $redis->sibling('', 'handoff', 'turn'), 'and ended its hand-off');
ok(defined waits($node, $holder), 'the releasing session waits');
is(queued('turn'), 1, 'queued behind it');
session_query($waiters[0], "SELECT redis_lock_release('turn')");
($out) = finish_query($holder, 5);
is($out, 't', 'and then got the lock');

# A woken waiter that is slow to come (its wake message comes 0.5 s late)
# holds the lock for 100 ms at most: then anyone may take it.
start_query($slow, "SELECT redis_lock_acquire_session('turn', 30000, 20000)");
ok(defined wait_until(5, sub { queued('turn') == 1 }), 'the slow waiter is queued');
($out) = session_query($holder,
	"SELECT redis_lock_release('turn'), redis_lock_acquire_session('turn', 30000, 0)");
is($out, 't|f', 'the lock released is refused to its releaser right after');
my $handoff = $redis->sibling('', 'handoff', 'turn');
ok(defined $handoff, 'while a release hands it to the woken waiter');
like($redis->cli('GET', $handoff), qr/\{\d+\}:wake:.*:turn\z/, 'named by its wake channel');
cmp_ok($redis->cli('PTTL', $handoff), '<=', 100, 'for 100 ms at most');
usleep(150_000);
($out) = session_query($holder, "SELECT redis_lock_acquire_session('turn', 30000, 0)");
is($out, 't', 'after which the releaser takes it');
session_query($holder, "SELECT redis_lock_release('turn')");
($out) = finish_query($slow, 5);
is($out, 't', 'and the slow waiter, still first in the queue, is woken by its release');
session_query($slow, "SELECT redis_lock_release('turn')");
is(queued('turn'), 0, 'nobody is left queued');
$slow->quit;

# --- interrupts while subscribed: the same errors, the subscription closed
session_query($holder, "SELECT redis_lock_acquire_session('busy')");
my $w = $waiters[0];
my $subscribed = subscribers();

session_query($w, 'SET statement_timeout = 500');
($out, $err) = session_query($w, "SELECT redis_lock_acquire('busy', 30000, -1)");
like($err, qr/ERROR:\s+57014: canceling statement due to statement timeout/,
	'statement_timeout ends a subscribed wait with 57014');
session_query($w, 'RESET statement_timeout');
is(subscribers(), $subscribed - 1, 'and closes its subscription');

session_query($w, 'SET lock_timeout = 300');
($out, $err) = session_query($w, "SELECT redis_lock_acquire('busy', 30000, -1)");
like($err, qr/ERROR:\s+55P03: canceling statement due to lock timeout/,
	'lock_timeout ends a subscribed wait with 55P03');
session_query($w, 'RESET lock_timeout');
is(subscribers(), $subscribed - 1, 'and closes its subscription');

($out, $err) = session_query($w, "SELECT redis_lock_acquire('busy', 30000, 300)");
is("$out$err", 'f', 'wait_ms ends a subscribed wait with false');

start_query($w, "SELECT redis_lock_acquire('busy', 30000, -1)");
waits($node, $w);
$node->safe_psql('postgres', 'SELECT pg_cancel_backend(' . pid_of($w) . ')');
ok(defined wait_for_stderr($w, qr/57014: canceling statement due to user request/, 5),
	'cancel ends a subscribed wait with 57014');
finish_query($w, 5);
is(subscribers(), $subscribed - 1, 'and closes its subscription');

# a waiter cancelled in the middle of the queue delays nobody
start_query($waiters[0], "SELECT redis_lock_acquire('busy', 30000, 20000)");
waits($node, $waiters[0]);
usleep(100_000);
start_query($waiters[1], "SELECT redis_lock_acquire('busy', 30000, 20000)");
waits($node, $waiters[1]);
usleep(100_000);
start_query($waiters[2],
	"SELECT redis_lock_acquire('busy', 30000, 20000) AND true, extract(epoch FROM clock_timestamp())");
waits($node, $waiters[2]);
usleep(300_000);
is(queued('busy'), 3, 'three waiters queued');
$node->safe_psql('postgres', 'SELECT pg_cancel_backend(' . pid_of($waiters[1]) . ')');
ok(defined wait_for_stderr($waiters[1], qr/57014/, 5), 'the middle one is cancelled');
finish_query($waiters[1], 5);
session_query($holder, "SELECT redis_lock_release('busy')");
($out) = finish_query($waiters[0], 5);
is($out, 't', 'the first waiter got the lock');
my ($t_commit) = session_query($waiters[0],
	"SELECT extract(epoch FROM clock_timestamp())");
($out) = finish_query($waiters[2], 5);
($granted, $t_grant) = split /\|/, $out;
is($granted, 't', 'the last waiter got the lock after the first');
cmp_ok($t_grant - $t_commit, '<', 0.2,
	'woken by the release, not by its poll, past the cancelled waiter');

# terminate
session_query($holder, "SELECT redis_lock_acquire_session('busy')");
$subscribed = subscribers();
start_query($waiters[0], "SELECT redis_lock_acquire('busy', 30000, -1)");
waits($node, $waiters[0]);
usleep(100_000);
$node->safe_psql('postgres', 'SELECT pg_terminate_backend(' . pid_of($waiters[0]) . ')');
ok(defined wait_until(5, sub { subscribers() < $subscribed }),
	'terminate ends a subscribed wait and its subscription');

# --- a Redis user that may use no channel, nor CONFIG: the waiter polls
$redis->cli('ACL', 'SETUSER', 'nochan', 'on', '>pw', '~*', '+@all', '-config',
	'resetchannels');
$node->safe_psql(
	'postgres', qq{
	CREATE SERVER plain FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '${\$redis->port}');
	CREATE USER MAPPING FOR PUBLIC SERVER plain
		OPTIONS (username 'nochan', password 'pw');
	GRANT USAGE ON FOREIGN SERVER plain TO PUBLIC;
});
my $plain_holder = new_session($node, 'plain');
my $plain_waiter = new_session($node, 'plain');
my $ms;
($granted, $ms) = hand_off($node, $plain_holder, $plain_waiter, 'acl');
is($granted, 't', 'a waiter denied its channel and CONFIG still gets the lock');
cmp_ok($ms, '<', 200, 'within the poll bound');
session_query($plain_holder, "SELECT redis_lock_acquire_session('acl')");
start_query($plain_waiter, "SELECT redis_lock_acquire('acl', 30000, 10000)");
waits($node, $plain_waiter);
session_query($plain_holder, "SELECT redis_lock_release('acl')");
($out, $err) = finish_query($plain_waiter, 10);
is("$out$err", 't', 'without an error or a warning');

# --- a subscription connection that Redis refuses: the waiter polls
# Redis is made to take no more clients than those connected, so that the
# waiter's main connection works and its subscription connection is refused.
my $full_holder = new_session($node);
my $full_waiter = new_session($node);
session_query($full_holder, "SELECT redis_lock_acquire_session('full')");
session_query($full_waiter, "SELECT redis_lock_acquire('warm-up')");
my $admin = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $redis->port)
  or die "cannot connect to Redis: $!";
my ($clients) = $redis->cli('INFO', 'clients') =~ /connected_clients:(\d+)/;

# Run a command on the admin connection; its one-line reply
sub admin
{
	my @args = @_;
	print $admin join('', '*', scalar @args, "\r\n",
		map { '$' . length($_) . "\r\n$_\r\n" } @args);
	my $reply = <$admin>;
	$reply =~ s/\r\n\z//;
	return $reply;
}
# the redis-cli that counted them has left
is(admin('CONFIG', 'SET', 'maxclients', $clients - 1), '+OK', 'Redis takes no more clients');
start_query($full_waiter,
	"SELECT redis_lock_acquire('full', 30000, 10000) AND true, extract(epoch FROM clock_timestamp())");
waits($node, $full_waiter);
usleep(300_000);
my ($t_release) = session_query($full_holder,
	"SELECT extract(epoch FROM clock_timestamp()) FROM redis_lock_release('full')");
($out, $err) = finish_query($full_waiter, 10);
($granted, $t_grant) = split /\|/, $out;
is($granted, 't', 'a waiter whose subscription connection is refused gets the lock');
cmp_ok($t_grant - $t_release, '<', 0.2, 'within the poll bound');
is($err, '', 'without an error or a warning');
is(admin('CONFIG', 'SET', 'maxclients', '10000'), '+OK', 'Redis takes clients again');
close $admin;
cmp_ok($redis->cli('INFO', 'stats') =~ /rejected_connections:(\d+)/ && $1, '>=', 1,
	'Redis refused a connection meanwhile');

# --- a Redis without sharded pub/sub, as before Redis 7: the release
# announces with PUBLISH, to a waiter that subscribed with SUBSCRIBE
my $unsharded = RedisLockTest->start_redis(
	config => qq{rename-command SPUBLISH ""\nrename-command SSUBSCRIBE ""\n});
$node->safe_psql(
	'postgres', qq{
	CREATE SERVER unsharded FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '${\$unsharded->port}');
	GRANT USAGE ON FOREIGN SERVER unsharded TO PUBLIC;
});
like($unsharded->cli('SPUBLISH', 'c', 'm'), qr/unknown command/, 'the Redis has no SPUBLISH');
my $old_holder = new_session($node, 'unsharded');
my $old_waiter = new_session($node, 'unsharded');
@ms = ();
for (1 .. 5)
{
	my ($granted, $ms) = hand_off($node, $old_holder, $old_waiter, 'old');
	is($granted, 't', "hand-off $_ without sharded pub/sub: the waiter got the lock");
	push @ms, $ms;
}
note 'hand-off ms without sharded pub/sub: ' . join(' ', map { sprintf '%.1f', $_ } @ms);
cmp_ok(median(@ms), '<', 10,
	'a release wakes the waiter within 10 ms (median of 5), not at its 50 ms poll');
like($unsharded->cli('CLIENT', 'LIST'), qr/\bsub=1\b/, 'through a SUBSCRIBE');

$node->stop;
done_testing();
