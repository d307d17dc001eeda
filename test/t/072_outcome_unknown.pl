# A call interrupted after its command was sent (statement_timeout while
# Redis sleeps) has an unknown outcome, and the abort settles it: a session
# lock Redis may have taken is released (compare-and-delete), a decrement
# Redis may have run is given back exactly once.  The reply of an
# interrupted call is never read as the reply of a later one.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use RedisLockTest qw(session_query wait_until);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('unknown', $redis);

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
session_query($s, 'SET redislock.command_timeout = 5000');
my ($out, $err, $secs, $h);

# Make Redis sleep $sleep seconds and run $sql with statement_timeout
# 200 ms meanwhile, checking that it fails with 57014 ($what names it);
# returns the seconds it took and the handle for $redis->wake.  In a
# transaction block the setting goes with the transaction's abort.
sub interrupted
{
	my ($sleep, $sql, $what) = @_;
	my $h = $redis->debug_sleep($sleep);
	my ($out, $err, $secs) = session_query($s, "SET statement_timeout = 200; $sql");
	like($err, qr/ERROR:\s+57014: canceling statement due to statement timeout/,
		"$what interrupted while Redis sleeps fails with 57014");
	session_query($s, 'RESET statement_timeout');
	return ($secs, $h);
}

is($redis->cli('MSET', 'a', '1', 'b', '2', 'st', '10'), 'OK', 'stocks a = 1, b = 2, st = 10');
($out) = session_query($s, "SELECT redis_stock_get('a')");
is($out, '1', 'the session reads stock a');

# --- a session acquire interrupted while Redis sleeps
($secs, $h) = interrupted(1, "SELECT redis_lock_acquire_session('ou1', 30000)", 'an acquire');
$redis->wake($h);
ok(defined wait_until(2, sub { $redis->cli('EXISTS', 'ou1') eq '0' }),
	'once Redis is awake, the lock it took for the interrupted acquire is released');
($out) = session_query($s, 'SELECT count(*) FROM redis_locks()');
is($out, '0', 'and the backend holds nothing');

# --- a decrement interrupted while Redis sleeps, in a transaction that
# rolls back
session_query($s, 'BEGIN');
($secs, $h) = interrupted(1, "SELECT redis_stock_decr('st', 3)", 'a decrement');
session_query($s, 'ROLLBACK');
$redis->wake($h);
ok(defined wait_until(2, sub { $redis->cli('GET', 'st') eq '10' }),
	'once Redis is awake, the stock is what it was before');
usleep(500_000);
is($redis->cli('GET', 'st'), '10', 'and stays so: given back once, not twice');

# --- no stale reply after an interrupted call
($secs, $h) = interrupted(2, "SELECT redis_stock_get('a')", 'a read');
cmp_ok($secs, '<', 0.7, 'at statement_timeout, not when Redis wakes');
$redis->wake($h);
($out, $err) = session_query($s, "SELECT redis_stock_get('b')");
is($out, '2', 'the next read returns its own reply, not the interrupted one\'s');
is($err, '', 'without any message');
($out) = session_query($s, "SELECT redis_stock_get('a')");
is($out, '1', 'and so does the one after it');

$s->quit;
$node->stop;
$redis->stop;

done_testing();
