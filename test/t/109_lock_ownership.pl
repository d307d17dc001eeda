# Who may end a lock, and what a release or renewal may take for granted:
# - two foreign servers that lead to the same keys (one Redis, one prefix)
#   are two owners: a lock taken through one is not released through the
#   other;
# - redis_lock_release_all() needs USAGE on the servers it releases on, and
#   when one server fails it forgets the locks that the others released;
# - a renewal (extend, the check before commit) whose reply comes after the
#   lease it set may have run out confirms nothing;
# - no Redis call runs in a parallel worker, even through a PARALLEL SAFE
#   wrapper.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DelayProxy;
use RedisLockTest qw(session_query);

my $redis = RedisLockTest->start_redis();
my $other = RedisLockTest->start_redis();
# Replies through the proxy come 0.6 s late.
my $proxy = DelayProxy->start($redis->port, 0.6);
my $node = RedisLockTest->new_node('ownership', $redis);
my ($port, $other_port, $proxy_port) = ($redis->port, $other->port, $proxy->port);
$node->safe_psql(
	'postgres', qq{
	CREATE SERVER twin FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$port');
	CREATE SERVER other FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$other_port');
	CREATE SERVER slow FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$proxy_port');
	GRANT USAGE ON FOREIGN SERVER twin, other, slow TO PUBLIC;
	CREATE ROLE holder;
	CREATE ROLE stranger;
	CREATE SERVER private FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$port');
	GRANT USAGE ON FOREIGN SERVER private TO holder;
	CREATE FUNCTION safe_wrapper(key text) RETURNS boolean
		LANGUAGE plpgsql PARALLEL SAFE
		AS \$\$ BEGIN RETURN redis_lock_acquire_session(key, 30000); END \$\$;
});

my $s = RedisLockTest::session($node);
my ($out, $err);

# --- two servers, one Redis and one prefix
RedisLockTest::works($s, "SELECT redis_lock_acquire_session('shared', 30000)", 't',
	'server redislock takes "shared"');
session_query($s, 'SET redislock.server = twin');
RedisLockTest::works($s, "SELECT redis_lock_acquire_session('shared', 30000, 0)", 'f',
	'server twin, same Redis and prefix, finds it held by another owner');
($out, $err) = session_query($s, "SELECT redis_lock_release('shared')");
is($out, 'f', 'server twin cannot release it');
like($redis->cli('GET', 'shared'), qr/^pg:/, 'the key stays in Redis');
session_query($s, 'RESET redislock.server');
RedisLockTest::works($s, "SELECT redis_lock_release('shared')", 't',
	'server redislock releases it');
is($redis->cli('EXISTS', 'shared'), '0', 'and the key is gone');

# --- release_all needs USAGE on the servers it releases on
session_query($s, 'SET ROLE holder; SET redislock.server = private');
RedisLockTest::works($s, "SELECT redis_lock_acquire_session('owned', 30000)", 't',
	'role holder takes a lock through server private');
session_query($s, 'SET ROLE stranger');
($out, $err) = session_query($s, 'SELECT redis_lock_release_all()');
like($err, qr/ERROR:\s+42501: permission denied for foreign server private/,
	'release_all as a role without USAGE on the server fails with 42501');
like($redis->cli('GET', 'owned'), qr/^pg:/, 'and leaves the lock in Redis');
session_query($s, 'SET ROLE holder');
RedisLockTest::works($s, 'SELECT redis_lock_release_all()', '1',
	'role holder releases it');
session_query($s, 'RESET ROLE; RESET redislock.server');

# --- release_all forgets what it released when another server fails
RedisLockTest::works($s, "SELECT redis_lock_acquire_session('here', 30000)", 't',
	'a lock on server redislock');
session_query($s, 'SET redislock.server = other');
RedisLockTest::works($s, "SELECT redis_lock_acquire_session('there', 30000)", 't',
	'and one on server other');
session_query($s, 'RESET redislock.server');
$other->stop;
($out, $err) = session_query($s, 'SELECT redis_lock_release_all()');
like($err, qr/ERROR:\s+08\w+:/, 'release_all fails on the stopped server');
is($redis->cli('EXISTS', 'here'), '0', 'having released the lock on the live one');
RedisLockTest::works($s, 'SELECT key FROM redis_locks() ORDER BY key', 'there',
	'which the backend has forgotten; it keeps the one it could not release');
$other->restart;
($out, $err) = session_query($s, 'SELECT redis_lock_release_all()');
is($out, '0', 'once the server is back (empty: it keeps nothing), release_all ends that one');
like($err, qr/WARNING:\s+55P03: lease of Redis lock "there" on server "other" was lost/,
	'saying that Redis no longer had it');
RedisLockTest::works($s, 'SELECT count(*) FROM redis_locks()', '0', 'and forgets it');

# --- renewals confirmed too late
session_query($s, 'SET redislock.server = slow; SET redislock.command_timeout = 5000');
RedisLockTest::works($s, "SELECT redis_lock_acquire_session('late', 5000)", 't',
	'a lock taken through a server that answers 0.6 s late');
($out, $err) = session_query($s, "SELECT redis_lock_extend('late', 500)");
is($out, 'f', 'extending it to 500 ms is not confirmed: the reply came later than that');
like($err, qr/WARNING:\s+55P03: lease of Redis lock "late" on server "slow" was lost/, 'and says so');
session_query($s, "SELECT redis_lock_release('late')");
RedisLockTest::works($s, "SELECT redis_lock_acquire_session('late', 5000)", 't',
	'the lock taken again for 5 s');
($out, $err) = session_query($s, "SELECT redis_lock_acquire('late', 500)");
like($err, qr/ERROR:\s+55P03: lease of Redis lock "late" on server "slow" was lost/,
	'taking it once more for 500 ms is an error: its renewal came later than that');
session_query($s, "SELECT redis_lock_release('late')");
session_query($s, 'BEGIN');
session_query($s, "SELECT redis_lock_acquire('late2', 500)");
($out, $err) = session_query($s, 'COMMIT');
like($err, qr/ERROR:\s+40001: Redis lock "late2" on server "slow" was lost before commit/,
	'a check before commit that came after the 500 ms lease aborts the commit');
session_query($s, 'RESET redislock.server; RESET redislock.command_timeout');

# --- parallel workers (force_parallel_mode is debug_parallel_query from 16 on)
my $force_parallel = $node->safe_psql('postgres', 'SHOW server_version_num') >= 160000
  ? 'debug_parallel_query' : 'force_parallel_mode';
session_query($s,
	"SET $force_parallel = on; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0");
($out, $err) = session_query($s, "EXPLAIN (COSTS OFF) SELECT safe_wrapper('par')");
like($out, qr/Gather/, 'the PARALLEL SAFE wrapper runs under Gather');
($out, $err) = session_query($s, "SELECT safe_wrapper('par')");
like($err, qr/ERROR:\s+25000: cannot use Redis locks or stock in a parallel worker/,
	'in a parallel worker, a Redis lock is refused with 25000');
is($redis->cli('EXISTS', 'par'), '0', 'and nothing is left in Redis');
session_query($s, "RESET $force_parallel");
RedisLockTest::works($s, "SELECT safe_wrapper('par')", 't',
	'the same wrapper works in the leader');
session_query($s, "SELECT redis_lock_release('par')");

$s->quit;
$node->stop;
$proxy->stop;
$redis->stop;
$other->stop;
done_testing();
