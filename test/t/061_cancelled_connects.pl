# A connect that statement_timeout cancels while it is in progress gives
# back what it holds: its socket, its wait set and their descriptor
# reservations.  The server's port is a black hole: a listening socket that
# never accepts, whose backlog is full, so that the kernel drops further
# connection requests and connects to it stay in progress.  After a hundred
# cancelled connects the backend holds no more descriptors than before, and
# it still connects to a Redis that runs.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IO::Select;
use Socket qw(PF_INET SOCK_STREAM inet_aton pack_sockaddr_in unpack_sockaddr_in);
use RedisLockTest qw(session_query);

my $cancels = 100;

# The black hole: listen with a backlog of 0 and fill it.
socket(my $listener, PF_INET, SOCK_STREAM, 0) or die "socket: $!";
bind($listener, pack_sockaddr_in(0, inet_aton('127.0.0.1'))) or die "bind: $!";
listen($listener, 0) or die "listen: $!";
my ($hole_port) = unpack_sockaddr_in(getsockname($listener));

# Start a non-blocking connect to the black hole and return its socket.
sub start_connect
{
	socket(my $sock, PF_INET, SOCK_STREAM, 0) or die "socket: $!";
	$sock->blocking(0);
	connect($sock, pack_sockaddr_in($hole_port, inet_aton('127.0.0.1')));
	return $sock;
}

my @backlog = map { start_connect() } 1 .. 4;
my $probe = start_connect();
ok(!IO::Select->new($probe)->can_write(1),
	'a connect to the black hole is still in progress after 1 s');
close $probe;

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('cancelled', $redis);
$node->safe_psql(
	'postgres', qq{
	CREATE USER MAPPING FOR PUBLIC SERVER redislock;
	CREATE SERVER hole FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$hole_port');
	CREATE USER MAPPING FOR PUBLIC SERVER hole;
	GRANT USAGE ON FOREIGN SERVER hole TO PUBLIC;
});

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 120);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
my ($pid) = session_query($s, 'SELECT pg_backend_pid()');
my ($out, $err);

# The descriptors the backend has open.
sub open_descriptors
{
	opendir(my $dir, "/proc/$pid/fd") or die "cannot list /proc/$pid/fd: $!";
	my $n = grep { !/^\.\.?$/ } readdir $dir;
	closedir $dir;
	return $n;
}

session_query($s,
	'SET redislock.server = hole; SET redislock.connect_timeout = 60000; '
	  . 'SET statement_timeout = 20');
($out, $err) = session_query($s, "SELECT redis_lock_acquire('k', 1000)");
like($err, qr/ERROR:\s+57014: canceling statement due to statement timeout/,
	'statement_timeout cancels a connect in progress');
my $before = open_descriptors();

my $timeouts = 0;
for (1 .. $cancels)
{
	($out, $err) = session_query($s, "SELECT redis_lock_acquire('k', 1000)");
	$timeouts++ if $err =~ /57014/;
}
is($timeouts, $cancels, "$cancels more connects cancelled by statement_timeout");
my $after = open_descriptors();
cmp_ok($after, '<=', $before + 2,
	'the backend holds no more descriptors than before them')
  or diag("$before descriptors before, $after after");

session_query($s, 'RESET statement_timeout; RESET redislock.server');
($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('k', 30000)");
is("$out$err", 't', 'the backend still connects to Redis and takes a lock');
($out, $err) = session_query($s, "SELECT redis_lock_release('k')");
is("$out$err", 't', 'and releases it');

$s->quit;
$node->stop;
$redis->stop;
close $_ foreach @backlog;
close $listener;

done_testing();
