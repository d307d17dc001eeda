# Redis that cannot be reached or does not answer gives an ERROR within the
# timeouts; Redis that requires a password refuses until a user mapping
# gives the right one, and a created or altered user mapping (or server)
# takes effect on the next call of the same session, also for a Redis ACL
# user.
use strict;
use warnings;

use IO::Socket::INET;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval);
use RedisLockTest qw(session_query);

my $redis = RedisLockTest->start_redis();
my $authed = RedisLockTest->start_redis(
	args     => [ '--requirepass', 'pw' ],
	password => 'pw');
my $node = RedisLockTest->new_node('auth', $redis);

# A port nobody listens on, and one where a socket listens but never
# accepts, so that connections complete and are never answered.
my $closed_port = PostgreSQL::Test::Cluster::get_free_port();
my $hung = IO::Socket::INET->new(
	Listen    => 1,
	LocalAddr => '127.0.0.1',
	LocalPort => 0,
	Proto     => 'tcp') or die "cannot listen: $!";
my $hung_port = $hung->sockport;
my $authed_port = $authed->port;

$node->safe_psql(
	'postgres', qq{
	CREATE SERVER closed FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$closed_port');
	CREATE SERVER hung FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$hung_port');
	CREATE SERVER authed FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$authed_port');
	GRANT USAGE ON FOREIGN SERVER closed, hung, authed TO PUBLIC;
});

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 30);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
session_query($s,
	'SET redislock.connect_timeout = 500; SET redislock.command_timeout = 300'
);
my ($pid) = session_query($s, 'SELECT pg_backend_pid()');
my ($out, $err, $secs);

# --- nothing listens
session_query($s, 'SET redislock.server = closed');
($out, $err, $secs) = session_query($s, "SELECT redis_lock_acquire('u1', 30000)");
like(
	$err,
	qr/ERROR:\s+08001: could not connect to Redis server "closed"\nDETAIL:  Connection to 127\.0\.0\.1:$closed_port failed/,
	'closed port: 08001 naming the endpoint');
like($err, qr/HINT:.*"closed"/, 'the hint names the foreign server');
cmp_ok($secs, '<', 1.5, 'within connect_timeout');
($out, $err, $secs) = session_query($s, "SELECT redis_stock_decr('u1')");
like($err, qr/ERROR:\s+08001: could not connect/,
	'closed port: stock functions fail the same way');
is((session_query($s, 'SELECT 1'))[0], '1', 'backend usable');

# --- something listens but never answers
session_query($s, 'SET redislock.server = hung');
($out, $err, $secs) = session_query($s, "SELECT redis_lock_acquire('u1', 30000)");
like(
	$err,
	qr/ERROR:\s+08006: Redis server "hung" did not answer within 300 ms\nDETAIL:  The command went to 127\.0\.0\.1:$hung_port;/,
	'silent server: 08006 once command_timeout has passed');
cmp_ok($secs, '<', 1.5, 'within the timeouts');
is((session_query($s, 'SELECT 1'))[0], '1', 'backend usable');

# --- ALTER SERVER takes effect on the next call
$node->safe_psql('postgres',
	"ALTER SERVER closed OPTIONS (SET port '" . $redis->port . "')");
session_query($s, 'SET redislock.server = closed');
($out, $err) = session_query($s, "SELECT redis_lock_acquire('u1', 30000)");
is($out, 't', 'after ALTER SERVER the same session reaches Redis');
is($err, '', 'without any message');

# --- Redis requires a password and no user mapping gives one
session_query($s, 'SET redislock.server = authed');
($out, $err) = session_query($s, "SELECT redis_lock_acquire('u2', 30000)");
like($err, qr/ERROR:\s+28(000|P01): .*127\.0\.0\.1:$authed_port/s,
	'no password: an authorization error naming the endpoint');
is($authed->cli('EXISTS', 'u2'), '0', 'nothing was locked');
is((session_query($s, 'SELECT 1'))[0], '1', 'backend usable');

# --- a user mapping with a wrong password
$node->safe_psql('postgres',
	"CREATE USER MAPPING FOR PUBLIC SERVER authed OPTIONS (password 'wrong')");
($out, $err) = session_query($s, "SELECT redis_lock_acquire('u2', 30000)");
like(
	$err,
	qr/ERROR:\s+28P01: Redis server "authed" refused authentication\nDETAIL:  Redis at 127\.0\.0\.1:$authed_port answered:/,
	'wrong password: 28P01');
like($err, qr/WRONGPASS/, 'with what Redis answered');
unlike($err, qr/wrong/, 'the password is not shown');

# --- the right password: the same session works on its next call
$node->safe_psql('postgres',
	"ALTER USER MAPPING FOR PUBLIC SERVER authed OPTIONS (SET password 'pw')");
($out, $err) = session_query($s, "SELECT redis_lock_acquire('u2', 30000)");
is($out, 't', 'after ALTER USER MAPPING the same session takes the lock');
is($err, '', 'without any message');
is((session_query($s, 'SELECT pg_backend_pid()'))[0], $pid, 'in the same backend');
is($authed->cli('EXISTS', 'u2'), '0', 'and released it at commit');

# --- a Redis ACL user
is($authed->cli('ACL', 'SETUSER', 'app', 'on', '>secret', '~*', '+@all'),
	'OK', 'Redis ACL user "app" created');
$node->safe_psql('postgres',
	"ALTER USER MAPPING FOR PUBLIC SERVER authed OPTIONS (ADD username 'app', SET password 'secret')"
);
($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('u3', 30000)");
is($out, 't', 'ACL user: the same session takes a lock');
is($err, '', 'without any message');
like($authed->cli('CLIENT', 'LIST'), qr/\buser=app\b/,
	'Redis sees a connection of user "app"');
like($authed->cli('GET', 'u3'), qr/^pg:.*:$pid:/, 'the lock is the backend\'s');

$node->safe_psql('postgres',
	"ALTER USER MAPPING FOR PUBLIC SERVER authed OPTIONS (SET password 'nope')");
($out, $err) = session_query($s, "SELECT redis_lock_acquire('u4', 30000)");
like($err, qr/ERROR:\s+28P01: .*refused authentication/,
	'ACL user with a wrong password: 28P01');
like($err, qr/WRONGPASS/, 'with what Redis answered');

# The session lock u3 was taken with the old mapping; it is still released
# where it was taken.
($out, $err) = session_query($s, "SELECT redis_lock_release('u3')");
is($out, 't', 'the lock taken before the mapping changed is released');
is($authed->cli('EXISTS', 'u3'), '0', 'and gone from Redis');

$s->quit;
$node->stop;
$authed->stop;
$redis->stop;

done_testing();
