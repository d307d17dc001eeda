# The handshake after connecting (AUTH with the user mapping's password,
# SELECT of the server's database) runs under connect_timeout, as the
# README says: with Redis stopped (SIGSTOP: the kernel still completes TCP
# connections, nothing answers), a first call fails with 08001 after about
# connect_timeout, however large command_timeout is, and the session works
# once Redis does; and a command_timeout shorter than connect_timeout does
# not cut the handshake short.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query);

my $plain = RedisLockTest->start_redis();
my $authed = RedisLockTest->start_redis(
	args     => [ '--requirepass', 'pw' ],
	password => 'pw');
my $node = RedisLockTest->new_node('handshake', $plain);
my ($plain_port, $authed_port) = ($plain->port, $authed->port);
$node->safe_psql(
	'postgres', qq{
	CREATE SERVER authed FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$authed_port');
	CREATE USER MAPPING FOR PUBLIC SERVER authed OPTIONS (password 'pw');
	CREATE SERVER db1 FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$plain_port', database '1');
	GRANT USAGE ON FOREIGN SERVER authed, db1 TO PUBLIC;
});

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
session_query($s,
	'SET redislock.connect_timeout = 500; SET redislock.command_timeout = 5000');
my ($out, $err, $secs);

foreach my $case ([ 'authed', 'AUTH', $authed ], [ 'db1', 'SELECT', $plain ])
{
	my ($server, $what, $redis) = @$case;
	my $port = $redis->port;

	session_query($s, "SET redislock.server = $server");
	$redis->pause;
	($out, $err, $secs) = session_query($s, "SELECT redis_lock_acquire('h1', 30000)");
	like($err,
		qr/ERROR:\s+08001: could not connect to Redis server "$server"\nDETAIL:  Connection to 127\.0\.0\.1:$port failed/,
		"$what unanswered: 08001 naming the endpoint");
	cmp_ok($secs, '>=', 0.45, "$what unanswered: not before connect_timeout");
	cmp_ok($secs, '<', 1.5, "$what unanswered: soon after connect_timeout, not command_timeout");
	$redis->resume;

	($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('h1', 30000)");
	is($out, 't', "$what: the session takes a lock once Redis runs");
	is($err, '', "$what: without any message");
	like($redis->cli('-n', $server eq 'db1' ? 1 : 0, 'GET', 'h1'), qr/^pg:/,
		"$what: in the server's database");
	($out) = session_query($s, "SELECT redis_lock_release('h1')");
	is($out, 't', "$what: and releases it");
}

# A command_timeout shorter than connect_timeout does not cut the handshake
# short: it counts from the first byte of the command, once connected.
session_query($s, 'SET redislock.server = authed');
session_query($s, 'SELECT redis_disconnect_all()');
session_query($s,
	'SET redislock.connect_timeout = 2000; SET redislock.command_timeout = 300');
$authed->pause;
($out, $err, $secs) = session_query($s, "SELECT redis_lock_acquire('h2', 30000)");
$authed->resume;
like($err, qr/ERROR:\s+08001: could not connect to Redis server "authed"/,
	'AUTH unanswered, command_timeout shorter: 08001');
cmp_ok($secs, '>=', 1.9, 'AUTH unanswered, command_timeout shorter: not before connect_timeout');

session_query($s, 'SELECT redis_disconnect_all()');
$authed->pause;
my $t0 = [ Time::HiRes::gettimeofday() ];
RedisLockTest::start_query($s, "SELECT redis_lock_acquire_session('h2', 30000)");
RedisLockTest::sleep_for(1);
$authed->resume;
($out, $err) = RedisLockTest::finish_query($s, 30);
is("$out$err", 't',
	'AUTH answered after 1 s, within connect_timeout but past command_timeout: the lock is taken');
cmp_ok(Time::HiRes::tv_interval($t0), '>=', 0.95, 'and it waited for the handshake');
session_query($s, "SELECT redis_lock_release('h2')");

$s->quit;
$node->stop;
$authed->stop;
$plain->stop;

done_testing();
