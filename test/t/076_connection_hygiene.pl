# A backend keeps nothing it no longer needs: the memory of a 64 MB
# command is given back once it is done, and the connection of a server or
# user mapping that was altered or dropped is closed when the backend next
# processes invalidations (at its next transaction) unless it still holds a
# lock, in which case it stays, marked invalid in redis_connections(), until
# the lock is released.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use RedisLockTest qw(session_query wait_until);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('hygiene', $redis);
$node->safe_psql('postgres', 'CREATE USER MAPPING FOR PUBLIC SERVER redislock');
is($redis->cli('SET', 'st', '5'), 'OK', 'stock "st" is 5');

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
my ($out, $err);

# --- a 64 MB key: the command buffer shrinks back.  A function catches
# errors, so that no message repeats the key 64 MB long; the key's length is
# a parameter, so that no cached plan keeps the key as a constant.
$node->safe_psql(
	'postgres', q{
	CREATE FUNCTION big_lock(release boolean, len integer) RETURNS text
	LANGUAGE plpgsql AS $$
	DECLARE
		k text := repeat('x', len);
	BEGIN
		IF release THEN
			RETURN redis_lock_release(k)::text;
		END IF;
		RETURN redis_lock_acquire_session(k, 30000)::text;
	EXCEPTION WHEN OTHERS THEN
		RETURN SQLSTATE;
	END $$;
});
session_query($s,
	'SET client_min_messages = error; SET log_min_messages = error; '
	  . 'SET redislock.command_timeout = 20000');
($out) = session_query($s, 'SELECT big_lock(false, 64 * 1024 * 1024)');
is($out, 'true', 'a session lock on a 64 MB key is taken');
($out) = session_query($s, 'SELECT big_lock(true, 64 * 1024 * 1024)');
is($out, 'true', 'and released');
session_query($s,
	'RESET client_min_messages; RESET log_min_messages; RESET redislock.command_timeout');
($out) = session_query($s, 'SELECT sum(total_bytes) FROM pg_backend_memory_contexts');
cmp_ok($out, '<', 32 * 1024 * 1024, 'the backend\'s memory is under 32 MB again')
  or diag(sprintf('%.1f MB', $out / 1024 / 1024));

# Wait until Redis has $n clients (the asking redis-cli aside).
sub clients_are
{
	my ($n) = @_;
	return defined wait_until(5, sub { $redis->client_count == $n });
}

# --- ALTER SERVER closes an unused connection
($out) = session_query($s, "SELECT redis_stock_get('st')");
is($out, '5', 'the session reads the stock');
is($redis->client_count, 1, 'through one connection');
$node->safe_psql('postgres', "ALTER SERVER redislock OPTIONS (ADD database '0')");
session_query($s, 'SELECT 1');
ok(clients_are(0), 'ALTER SERVER from another session: the connection is closed');
($out, $err) = session_query($s, "SELECT redis_stock_get('st')");
is($out, '5', 'the next call reconnects');
is($err, '', 'without any message');

# --- DROP USER MAPPING closes it too
$node->safe_psql('postgres', 'DROP USER MAPPING FOR PUBLIC SERVER redislock');
session_query($s, 'SELECT 1');
ok(clients_are(0), 'DROP USER MAPPING from another session: the connection is closed');

# --- a connection holding a lock is kept until the lock is released
($out) = session_query($s, "SELECT redis_lock_acquire_session('held', 30000)");
is($out, 't', 'the session holds a session lock');
($out) = session_query($s, 'SELECT in_use, valid FROM redis_connections()');
is($out, 't|t', 'its connection is in use and valid');
$node->safe_psql('postgres', "ALTER SERVER redislock OPTIONS (SET database '0')");
($out) = session_query($s, 'SELECT in_use, valid FROM redis_connections()');
is($out, 't|f', 'after ALTER SERVER it is still in use, and no longer valid');
usleep(200_000);
is($redis->client_count, 1, 'and it is still open');
($out) = session_query($s, "SELECT redis_lock_release('held')");
is($out, 't', 'the lock is released');
is($redis->cli('EXISTS', 'held'), '0', 'in Redis');
ok(clients_are(0), 'and then the invalid connection is closed');
($out) = session_query($s, 'SELECT count(*) FROM redis_connections()');
is($out, '0', 'redis_connections() no longer lists it');

$s->quit;
$node->stop;
$redis->stop;

done_testing();
