# redis_fence_guard(key, stored): the fencing check made where the data is.
# A holder paused past its lease (Kleppmann's scenario) must not overwrite
# what the next holder wrote: the next holder's token is larger, so the
# paused holder's write is refused with 40001, whether the next holder
# committed before it or while it waited for the row.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query session works start_query finish_query wait_until);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('fence_guard', $redis);
$node->safe_psql('postgres', q{
	CREATE TABLE account (id int PRIMARY KEY, balance int NOT NULL, fence bigint);
	INSERT INTO account VALUES (7, 100, NULL);
	GRANT ALL ON account TO PUBLIC;
});

my $paused = session($node);
my $next = session($node);
my ($out, $err);

my $debit = q{UPDATE account SET balance = balance - 10,
	fence = redis_fence_guard('acct:7', fence) WHERE id = 7 RETURNING fence};

# The account's balance and stored token.
sub account
{
	return $node->safe_psql('postgres', 'SELECT balance, fence FROM account WHERE id = 7');
}

# --- first writes
works($next, "BEGIN; SELECT redis_lock_acquire('acct:7', 30000)", 't', 'a holder takes the lock');
my ($token) = session_query($next, "SELECT redis_lock_fence('acct:7')");
works($next, $debit, $token, 'its write with no token stored yet stores its token');
works($next, $debit, $token, 'and a second write of the same holder passes');
works($next, 'COMMIT', '', 'and commits');
is(account(), "80|$token", 'the row holds both debits and the token');

# --- a holder paused past its lease, after the next holder committed
works($paused, "BEGIN; SELECT redis_lock_acquire('acct:7', 500)", 't',
	'a holder takes the lock with a 500 ms lease');
my ($old) = session_query($paused, "SELECT redis_lock_fence('acct:7')");
ok(defined wait_until(5, sub { $redis->command('EXISTS', 'acct:7') eq '0' }),
	'and pauses until its lease has run out');
works($next, "BEGIN; SELECT redis_lock_acquire('acct:7', 30000)", 't', 'the next holder takes it');
my ($new) = session_query($next, "SELECT redis_lock_fence('acct:7')");
ok($new > $old, 'with a larger token');
works($next, $debit, $new, 'writes');
works($next, 'COMMIT', '', 'and commits');
($out, $err) = session_query($paused, $debit);
like($err, qr/ERROR:  40001: fencing token $old of Redis lock "acct:7" is older than the stored token $new/,
	'the paused holder\'s write is refused with 40001');
session_query($paused, 'ROLLBACK');
is(account(), "70|$new", 'the row keeps the next holder\'s write and token');

# --- the same while the next holder's write is not yet committed: the
# paused holder waits for the row, then sees the newer token
works($paused, "BEGIN; SELECT redis_lock_acquire('acct:7', 500)", 't', 'a holder takes the lock again');
($old) = session_query($paused, "SELECT redis_lock_fence('acct:7')");
ok(defined wait_until(5, sub { $redis->command('EXISTS', 'acct:7') eq '0' }),
	'and pauses until its lease has run out');
works($next, "BEGIN; SELECT redis_lock_acquire('acct:7', 30000)", 't', 'the next holder takes it');
($new) = session_query($next, "SELECT redis_lock_fence('acct:7')");
works($next, $debit, $new, 'and writes without committing');
start_query($paused, $debit);
ok(defined wait_until(10, sub {
	$node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE account%'") eq '1' }),
	'the paused holder\'s write waits for the row');
works($next, 'COMMIT', '', 'the next holder commits');
($out, $err) = finish_query($paused, 10);
like($err, qr/ERROR:  40001: fencing token $old of Redis lock "acct:7" is older than the stored token $new/,
	'and the paused holder\'s write, evaluated again on the new row, is refused');
session_query($paused, 'ROLLBACK');
is(account(), "60|$new", 'the row keeps the next holder\'s write and token');

# --- not held
($out, $err) = session_query($paused, $debit);
like($err, qr/ERROR:  55000: you do not hold Redis lock "acct:7"/, 'a write without the lock fails with 55000');
works($paused, "SELECT redis_lock_acquire_session('acct:7', 30000)", 't', 'a session lock');
works($paused, "SELECT redis_lock_release('acct:7')", 't', 'released');
($out, $err) = session_query($paused, "SELECT redis_fence_guard('acct:7', NULL)");
like($err, qr/ERROR:  55000: you do not hold Redis lock "acct:7"/, 'a released lock guards nothing');
($out, $err) = session_query($paused, 'SELECT redis_fence_guard(NULL, 1)');
like($err, qr/ERROR:  22004: Redis key must not be null/, 'a NULL key is refused');
is(account(), "60|$new", 'and the row is unchanged');

$paused->quit;
$next->quit;
$node->stop;
$redis->stop;

done_testing();
