# The shared lock table, with redislock preloaded: redis_locks() in any
# session shows every backend's locks, held and awaited, with their pids;
# redis_blocking_pids() names the holder of what a waiter waits for; keys of
# other roles' backends are hidden as pg_stat_activity hides their queries;
# a full table refuses an acquire before Redis is touched; and an entry
# leaves with its lock on every way out (release, commit, a wait that ran
# out or was cancelled, backend exit).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query start_query finish_query wait_until
  session works terminate_backend);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('shared_locks', $redis,
	conf => "shared_preload_libraries = 'redislock'\nredislock.max_locks = 4");
$node->safe_psql(
	'postgres', q{
	CREATE ROLE alice LOGIN;
	CREATE ROLE bob LOGIN IN ROLE pg_read_all_stats;
});

my $holder = session($node);
my $waiter = session($node);
my $viewer = session($node);
my ($holder_pid) = session_query($holder, 'SELECT pg_backend_pid()');
my ($waiter_pid) = session_query($waiter, 'SELECT pg_backend_pid()');

works($holder, "BEGIN; SELECT redis_lock_acquire('order:42', 60000)",
	't', 'a session takes a transaction lock');
start_query($waiter, "SELECT redis_lock_acquire('order:42', 60000, 20000)");
ok( defined wait_until(
		10,
		sub {
			(session_query($viewer,
				"SELECT count(*) FROM redis_locks() WHERE pid = $waiter_pid"))[0]
			  eq '1';
		}),
	'the waiter shows in a third session');

works(
	$viewer, q{
	SELECT pid, key, scope, holds, server, granted,
	       waiting_since IS NOT NULL, fence IS NOT NULL,
	       lease_expires_at > now(), renewals
	  FROM redis_locks() ORDER BY granted DESC},
	"$holder_pid|order:42|transaction|1|redislock|t|f|t|t|0\n"
	  . "$waiter_pid|order:42|transaction|0|redislock|f|t|f||0",
	'a third session sees the holder with its pid, and the waiter not granted');
works($viewer, "SELECT redis_blocking_pids($waiter_pid)",
	"{$holder_pid}", 'redis_blocking_pids() names the holder');
works($viewer, "SELECT redis_blocking_pids($holder_pid)",
	'{}', 'and nobody for the holder, who waits for nothing');

# keys: hidden from other roles, as pg_stat_activity hides queries
my $alice = session($node);
works(
	$alice,
	"SET SESSION AUTHORIZATION alice; SELECT redis_lock_acquire_session('alice:1', 60000)",
	't', "alice takes a session lock");
works(
	$viewer, q{
	SET ROLE alice;
	SELECT pid <> 0, key FROM redis_locks() ORDER BY key NULLS LAST;
	RESET ROLE},
	"t|alice:1\nt|\nt|",
	'alice sees her own key, not the keys of other roles\' backends');
works(
	$viewer, q{
	SET ROLE bob;
	SELECT key FROM redis_locks() ORDER BY key;
	RESET ROLE},
	"alice:1\norder:42\norder:42",
	'a member of pg_read_all_stats sees every key');

works($holder, 'COMMIT', '', 'the holder commits');
my ($out, $err) = finish_query($waiter, 20);
is("$out$err", 't', 'and the waiter gets the lock');
works($viewer, "SELECT count(*) FROM redis_locks() WHERE key = 'order:42'",
	'0', 'the committed lock and the waiter\'s statement lock are gone');

# a full table: 4 entries, alice holds one
works(
	$holder, q{
	SELECT redis_lock_acquire_session('f1', 60000),
	       redis_lock_acquire_session('f2', 60000),
	       redis_lock_acquire_session('f3', 60000)},
	't|t|t', 'three more locks fill the table');
($out, $err) = session_query($holder,
	"SELECT redis_lock_acquire_session('f4', 60000)");
like($err, qr/ERROR:  53200: out of Redis lock table entries/,
	'a fourth gives 53200');
like($err, qr/HINT:  You might need to increase redislock\.max_locks\./,
	'with a hint');
is($redis->command('EXISTS', 'f4'), '0', 'and Redis was not touched');
works($holder, "SELECT redis_lock_acquire_session('f1', 60000)",
	't', 'a lock held already needs no new entry');
works($holder, "SELECT redis_lock_release('f1'), redis_lock_release('f1')",
	't|t', 'its last release');
works($holder, "SELECT redis_lock_acquire_session('f4', 60000)",
	't', 'frees an entry for another lock');
works($holder, 'SELECT redis_lock_release_all()', '3', 'release all');
works($viewer, 'SELECT count(*) FROM redis_locks()', '1',
	'frees their entries: alice\'s lock is left');

# waits that end without the lock leave no entry
works($holder, "SELECT redis_lock_acquire_session('w', 60000)", 't',
	'the holder takes w');
works($waiter, "SELECT redis_lock_acquire('w', 60000, 200)", 'f',
	'a wait that runs out');
works($viewer, "SELECT count(*) FROM redis_locks() WHERE pid = $waiter_pid",
	'0', 'leaves no entry');
($out, $err) = session_query($waiter,
	"SET lock_timeout = 200; SELECT redis_lock_acquire('w', 60000, -1)");
like($err, qr/ERROR:  55P03/, 'a wait ended by lock_timeout');
works($viewer, "SELECT count(*) FROM redis_locks() WHERE pid = $waiter_pid",
	'0', 'leaves no entry');
($out, $err) = session_query($waiter, q{
	RESET lock_timeout;
	BEGIN;
	SAVEPOINT s;
	SET LOCAL lock_timeout = 200;
	SELECT redis_lock_acquire('w', 60000, -1);
	ROLLBACK TO SAVEPOINT s;
	SELECT count(*) FROM redis_locks() WHERE pid = pg_backend_pid();
	COMMIT});
like($out, qr/^0$/m, 'nor does one in a savepoint, once rolled back to');

# a backend that exits, or is terminated, leaves no entry
works($holder, "SELECT redis_lock_acquire_session('x1', 60000)", 't',
	'the holder takes another session lock');
ok(terminate_backend($node, $holder_pid), 'and is terminated');
ok( defined wait_until(
		10,
		sub {
			(session_query($viewer,
				"SELECT count(*) FROM redis_locks() WHERE pid = $holder_pid"))[0]
			  eq '0';
		}),
	'its entries are gone');
$alice->quit;
ok( defined wait_until(
		10,
		sub {
			(session_query($viewer, 'SELECT count(*) FROM redis_locks()'))[0]
			  eq '0';
		}),
	'and so are those of a backend that quit');

$holder->quit;
$waiter->quit;
$viewer->quit;
$node->stop;
$redis->stop;

done_testing();
