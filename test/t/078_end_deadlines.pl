# Each transaction end has a bound of its own.  A savepoint rolled back
# inside a statement (an exception block) ends with its own deadline; the
# commit that ends the statement later, and the exit of a terminated
# backend, get new ones: they still reopen a connection that Redis closed
# meanwhile and release the locks, rather than finding their time already
# spent.  The ends of one ROLLBACK unwinding savepoints share one bound
# (070_end_bounds.pl).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query wait_until);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('end_deadlines', $redis);

# Redis closes connections idle for more than a second; the sleeps below
# outlast that and command_timeout.
is($redis->cli('CONFIG', 'SET', 'timeout', '1'), 'OK', 'Redis closes clients idle for 1 s');

$node->safe_psql(
	'postgres', q{
	CREATE FUNCTION undo_then_sleep(kept text, undone text) RETURNS void
	LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM redis_lock_acquire(kept, 60000);
		BEGIN
			PERFORM redis_lock_acquire(undone, 60000);
			RAISE EXCEPTION 'undo';
		EXCEPTION WHEN raise_exception THEN
			NULL;
		END;
		PERFORM pg_sleep(3.5);
	END $$;
});

my $settings = 'SET redislock.command_timeout = 1000; SET redislock.verify_before_commit = off;';

# --- a DO block: the savepoint's end, then the implicit commit
my ($ret, $out, $err) = $node->psql(
	'postgres', $settings . q{
	DO $$
	BEGIN
		PERFORM undo_then_sleep('do_kept', 'do_undone');
	END $$;
});
is($ret, 0, 'DO block with a rolled-back savepoint and a sleep succeeds');
is($redis->cli('EXISTS', 'do_undone'), '0', 'DO: the savepoint released its lock');
is($redis->cli('EXISTS', 'do_kept'), '0',
	'DO: the implicit commit reopened the closed connection and released the lock');

# --- SELECT f(): the same through a function call
($ret, $out, $err) = $node->psql('postgres',
	$settings . q{SELECT undo_then_sleep('f_kept', 'f_undone');});
is($ret, 0, 'SELECT f() succeeds');
is($redis->cli('EXISTS', 'f_kept'), '0',
	'SELECT f(): the commit that ends the statement released the lock');
is($err, '', 'SELECT f(): without a warning');

# --- a session lock, a ROLLBACK TO SAVEPOINT, then the backend terminated
my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s->set_query_timer_restart;
session_query($s, $settings);
my ($pid) = session_query($s, 'SELECT pg_backend_pid()');
session_query($s, 'BEGIN');
($out) = session_query($s, "SELECT redis_lock_acquire_session('sess_kept', 60000)");
is($out, 't', 'session lock taken');
session_query($s, 'SAVEPOINT sp');
($out) = session_query($s, "SELECT redis_lock_acquire('sess_undone', 60000)");
is($out, 't', 'transaction lock taken in a savepoint');
session_query($s, 'ROLLBACK TO SAVEPOINT sp');
is($redis->cli('EXISTS', 'sess_undone'), '0', 'ROLLBACK TO released the savepoint\'s lock');
ok(defined wait_until(10, sub { $redis->client_count == 0 }),
	'Redis closed the idle connection');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
	'the backend exited');
ok(defined wait_until(5, sub { $redis->cli('EXISTS', 'sess_kept') eq '0' }),
	'its exit reopened the connection and released the session lock');
$s->quit;

done_testing();
