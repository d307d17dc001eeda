# redis_stats(), with redislock preloaded: a row per server of the
# database, counted over all backends, whose counters move as the
# operations they count (calls, round trips, errors, reconnects, acquires,
# waits and their time, timeouts, leases lost, give-backs, decrements
# recovered); redis_stats_reset() starts them again and is not for PUBLIC;
# a crash restart starts with new counters and an empty lock table, and
# counts what the background worker then recovers.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query start_query finish_query wait_until
  session works crash_restart);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('stats', $redis,
	conf => "shared_preload_libraries = 'redislock'\nrestart_after_crash = on");
my $closed_port = PostgreSQL::Test::Cluster::get_free_port();
$node->safe_psql(
	'postgres', qq{
	CREATE SERVER gone FOREIGN DATA WRAPPER redislock
	  OPTIONS (host '127.0.0.1', port '$closed_port');
	GRANT USAGE ON FOREIGN SERVER gone TO PUBLIC;
	CREATE ROLE alice LOGIN;
});

my $s1 = session($node);
my $s2 = session($node);
my $viewer = session($node);

# The counters of server $server named in @names, as "name=value ...".
sub counters
{
	my ($server, @names) = @_;
	my $cols = join " || ' ' || ", map { "'$_=' || $_" } @names;
	my ($out, $err) = session_query($viewer,
		"SELECT $cols FROM redis_stats() WHERE server = '$server'");
	return "$out$err";
}

works($viewer, 'SELECT server, calls, stats_reset IS NULL FROM redis_stats() ORDER BY server',
	"gone|0|t\nredislock|0|t", 'a row per server, zeros before any use');

# the scripts loaded once, so that each call below is one command
works($s1, "SELECT redis_lock_acquire('warm', 60000), redis_lock_release('warm')",
	"t|t", 'a lock taken and released');
works($viewer, 'SELECT redis_stats_reset()', '', 'the counters are reset');

works($s1, "SELECT redis_lock_acquire_session('a', 60000)", 't',
	'a lock is taken');
is(counters('redislock', qw(calls round_trips acquires errors)),
	'calls=1 round_trips=1 acquires=1 errors=0',
	'one call, one round trip, one acquire');
works($s1, "SELECT redis_lock_release('a')", 't', 'and released');
is(counters('redislock', qw(calls round_trips acquires)),
	'calls=2 round_trips=2 acquires=1', 'one more call and round trip');

# waits, their time, and a wait that runs out
works($s1, "SELECT redis_lock_acquire_session('w', 60000)", 't',
	'a session holds w');
works($s2, "SELECT redis_lock_acquire('w', 60000, 300)", 'f',
	'another waits 300 ms for it in vain');
my ($out) = session_query($viewer,
	"SELECT acquire_waits, acquire_timeouts, wait_ms >= 300, acquires FROM redis_stats() WHERE server = 'redislock'");
is($out, '1|1|t|2', 'a wait, a timeout, 300 ms or more of waiting');
start_query($s2, "SELECT redis_lock_acquire('w', 60000, 20000)");
sleep 1;
works($s1, "SELECT redis_lock_release('w')", 't', 'the holder releases');
my $err;
($out, $err) = finish_query($s2, 20);
is("$out$err", 't', 'and the waiter gets the lock');
($out) = session_query($viewer,
	"SELECT acquire_waits, acquire_timeouts, wait_ms >= 1300, acquires FROM redis_stats() WHERE server = 'redislock'");
is($out, '2|1|t|3', 'another wait, no timeout, a second of waiting more');

# a lost lease, found by the check before commit
($out, $err) = session_query($s1,
	"BEGIN; SELECT redis_lock_acquire('lost', 60000)");
$redis->command('DEL', 'lost');
($out, $err) = session_query($s1, 'COMMIT');
like($err, qr/ERROR:  40001/, 'a transaction whose lock was deleted fails to commit');
is(counters('redislock', 'leases_lost'), 'leases_lost=1', 'a lease lost');

# a give-back at rollback
works(
	$s1, q{
	SELECT redis_stock_set('st', 5);
	BEGIN;
	SELECT redis_stock_decr('st', 2);
	ROLLBACK;
	SELECT redis_stock_get('st')},
	"\n3\n5", 'a rolled-back decrement is given back');
is(counters('redislock', 'give_backs'), 'give_backs=1', 'a give-back');

# a connection that Redis closed while idle is opened again
$redis->command('CLIENT', 'KILL', 'TYPE', 'normal');
works($s1, "SELECT redis_stock_get('st')", '5', 'a call after Redis closed the connection');
($out) = session_query($viewer,
	"SELECT reconnects >= 1 FROM redis_stats() WHERE server = 'redislock'");
is($out, 't', 'reconnects');

# a server that cannot be reached
($out, $err) = session_query($s1, q{
	SET redislock.server = gone;
	SELECT redis_lock_acquire('g', 60000);
	RESET redislock.server});
like($err, qr/ERROR:  08001/, 'a server nobody listens for fails');
is(counters('gone', qw(errors acquires)), 'errors=1 acquires=0',
	'an error for that server');
is(counters('redislock', 'errors'), 'errors=0', 'none for the other');

# none of what is counted above is a renewal, redirect or failover
is(counters('redislock', qw(renewals redirects failovers recovered)),
	'renewals=0 redirects=0 failovers=0 recovered=0',
	'counters of what did not happen stay at zero');

# resetting: not for PUBLIC
($out, $err) = session_query($viewer,
	'SET ROLE alice; SELECT redis_stats_reset(); RESET ROLE');
like($err, qr/ERROR:  42501: permission denied for function redis_stats_reset/,
	'redis_stats_reset() is revoked from PUBLIC');
works($viewer, 'SELECT redis_stats_reset()', '', 'a superuser resets');
works(
	$viewer,
	'SELECT server, calls + round_trips + acquires + errors + give_backs + leases_lost, stats_reset > now() - interval \'1 minute\' FROM redis_stats() ORDER BY server',
	"gone|0|t\nredislock|0|t",
	'every counter starts again at zero, and the time of the reset is kept');

# recovery after a crash: a new table and new counters
($out) = session_query($s2,
	"BEGIN; SELECT redis_stock_decr('st', 1), redis_lock_acquire_session('k', 60000), pg_backend_pid()");
my (undef, undef, $pid) = split /\|/, $out;
works($viewer, 'SELECT redis_lock_acquire_session(\'v\', 60000)', 't',
	'another backend holds a lock too');
ok(crash_restart($node, $pid), 'the server restarted after a backend was killed');
$s1->quit;
$s2->quit;
$viewer->quit;
$viewer = session($node);
works($viewer, 'SELECT count(*) FROM redis_locks()', '0',
	'the lock table starts empty');
is(counters('redislock', qw(acquires)), 'acquires=0',
	'the counters start from zero');
ok( defined wait_until(15,
		sub { counters('redislock', 'recovered') eq 'recovered=1' }),
	'the background worker gives back the killed transaction\'s decrement, and it is counted'
);

$viewer->quit;
$node->stop;
$redis->stop;

done_testing();
