# Waiting for a Redis lock is interruptible like a PostgreSQL lock wait:
# statement_timeout, lock_timeout and query cancel end it promptly with the
# usual SQLSTATEs, a wait_ms limit ends it with false, and the waiter shows
# in pg_stat_activity with wait event type Extension.  A released lock is
# picked up promptly by the waiter.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use RedisLockTest qw(session_query start_query finish_query);

# Wait until pg_stat_activity shows the backend waiting on the extension;
# returns its "wait_event_type|wait_event|state", the last one seen.
sub wait_for_waiter
{
	my ($node, $pid) = @_;
	my $row = '';
	my $t0 = [gettimeofday];
	while (tv_interval($t0) < 10)
	{
		$row = $node->safe_psql('postgres',
			"SELECT wait_event_type, wait_event, state FROM pg_stat_activity WHERE pid = $pid"
		);
		last if $row =~ /^Extension\|/;
		usleep(10_000);
	}
	return $row;
}

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('interrupts', $redis);

is($redis->cli('SET', 'busy', 'someone', 'NX', 'PX', '60000'), 'OK',
	'another client holds key "busy"');

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 30);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
my ($pid) = session_query($s, 'SELECT pg_backend_pid()');
my ($out, $err, $secs);

# --- statement_timeout
session_query($s, 'SET statement_timeout = 500');
($out, $err, $secs) = session_query($s, "SELECT redis_lock_acquire('busy', 30000, -1)");
like($err, qr/ERROR:\s+57014: canceling statement due to statement timeout/,
	'statement_timeout ends the wait with 57014');
cmp_ok($secs, '>=', 0.45, 'not before statement_timeout');
cmp_ok($secs, '<', 0.9, 'and promptly after it');
session_query($s, 'RESET statement_timeout');

# --- lock_timeout
session_query($s, 'SET lock_timeout = 300');
($out, $err, $secs) = session_query($s, "SELECT redis_lock_acquire('busy', 30000, -1)");
like($err, qr/ERROR:\s+55P03: canceling statement due to lock timeout/,
	'lock_timeout ends the wait with 55P03');
like($err, qr/"busy"/, 'the error names the key');
cmp_ok($secs, '>=', 0.28, 'not before lock_timeout');
cmp_ok($secs, '<', 0.7, 'and promptly after it');

# lock_timeout shorter than wait_ms wins, and longer does not.
($out, $err, $secs) = session_query($s, "SELECT redis_lock_acquire('busy', 30000, 5000)");
like($err, qr/ERROR:\s+55P03: canceling statement due to lock timeout/,
	'lock_timeout also ends a wait with a longer wait_ms');
cmp_ok($secs, '<', 0.7, 'promptly');
($out, $err, $secs) = session_query($s, "SELECT redis_lock_acquire('busy', 30000, 100)");
is($out, 'f', 'a wait_ms below lock_timeout returns false');
is($err, '', 'without an error');
session_query($s, 'RESET lock_timeout');

# --- wait_ms
($out, $err, $secs) = session_query($s, "SELECT redis_lock_acquire('busy', 30000, 200)");
is($out, 'f', 'wait_ms ends the wait with false');
is($err, '', 'without any message');
cmp_ok($secs, '>=', 0.18, 'not before wait_ms');
cmp_ok($secs, '<', 0.6, 'and promptly after it');
($out, $err, $secs) = session_query($s, "SELECT redis_lock_acquire('busy', 30000, 0)");
is($out, 'f', 'wait_ms 0 does not wait');
cmp_ok($secs, '<', 0.3, 'and returns at once');

# --- query cancel, and the wait event
start_query($s, "SELECT redis_lock_acquire('busy', 30000, -1)");
like(wait_for_waiter($node, $pid), qr/^Extension\|\w+\|active$/,
	'pg_stat_activity shows the waiter with wait event type Extension');
is($node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)"),
	't', 'cancel sent');
my $t0 = [gettimeofday];
($out, $err) = finish_query($s, 10);
$secs = tv_interval($t0);
like($err, qr/ERROR:\s+57014: canceling statement due to user request/,
	'pg_cancel_backend ends the wait with 57014');
cmp_ok($secs, '<', 0.5, 'promptly');
is($node->safe_psql('postgres',
	"SELECT wait_event_type IS DISTINCT FROM 'Extension' FROM pg_stat_activity WHERE pid = $pid"),
	't', 'the backend no longer shows the wait');
($out, $err) = session_query($s, 'SELECT count(*) FROM redis_locks()');
is($out, '0', 'the cancelled backend does not count the lock as held');

# --- the holder releases: the waiter gets the lock promptly
start_query($s, "SELECT redis_lock_acquire_session('busy', 30000, -1)");
like(wait_for_waiter($node, $pid), qr/^Extension\|/, 'waiting again');
$t0 = [gettimeofday];
is($redis->cli('DEL', 'busy'), '1', 'the other client releases the lock');
($out, $err) = finish_query($s, 10);
$secs = tv_interval($t0);
is($out, 't', 'the waiter takes the released lock');
is($err, '', 'without any message');
cmp_ok($secs, '<', 0.5, 'promptly');
like($redis->cli('GET', 'busy'), qr/^pg:.*:$pid:/, 'the lock is now the waiter\'s');

# --- two PostgreSQL sessions: one waits for the other
my $s2 = $node->background_psql('postgres', on_error_stop => 0, timeout => 30);
$s2->set_query_timer_restart;
my ($pid2) = session_query($s2, 'SELECT pg_backend_pid()');
start_query($s2, "SELECT redis_lock_acquire('busy', 30000, -1)");
like(wait_for_waiter($node, $pid2), qr/^Extension\|/,
	'a second backend waits for the first one\'s lock');
($out) = session_query($s, "SELECT redis_lock_release('busy')");
is($out, 't', 'the first backend releases the lock');
$t0 = [gettimeofday];
($out, $err) = finish_query($s2, 10);
is($out, 't', 'the second backend takes it');
cmp_ok(tv_interval($t0), '<', 0.5, 'promptly');
is($redis->cli('EXISTS', 'busy'), '0',
	'and released it at the end of its transaction');

$s2->quit;
$s->quit;
$node->stop;
$redis->stop;

done_testing();
