# Fencing tokens and the state kept for them.  A token is the larger of
# Redis' clock in microseconds and the key's last token plus one, kept in
# the key's fence sibling for the lock's lease only (extend renews both), so
# the tokens of successive holders increase: from one backend to another,
# after the key was free past its lease (the sibling gone), and across a
# Redis restart without persistence.  The acquire script checks the sibling
# before it writes: when it holds something other than an integer the
# acquire fails and leaves no lock key behind (an orphan the backend would
# not know it holds).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Math::BigInt;
use RedisLockTest qw(session_query wait_until);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('fencing', $redis);

my $s1 = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
my $s2 = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s1->set_query_timer_restart;
my ($out, $err);

# Take session lock $key in session $s for $ttl ms and return its fencing
# token as a Math::BigInt (NaN if the acquire failed).
sub token
{
	my ($s, $key, $ttl) = @_;
	my ($out) = session_query($s,
		"SELECT redis_lock_fence('$key') FROM redis_lock_acquire_session('$key', $ttl) AS got WHERE got");
	return Math::BigInt->new($out);
}

# Redis' clock in microseconds.
sub redis_micros
{
	my ($secs, $micros) = @{ $redis->command('TIME') };
	return Math::BigInt->new($secs) * 1_000_000 + $micros;
}

# --- the token and its sibling
my $before = redis_micros();
my $t1 = token($s1, 'f', 2000);
ok($t1 >= $before && $t1 <= redis_micros(), 'the token is Redis\' clock in microseconds');
my $fence = $redis->sibling('', 'fence', 'f');
ok(defined $fence, 'the token is kept in the key\'s fence sibling');
$fence //= 'no-sibling';
is($redis->command('GET', $fence), "$t1", 'which holds the token');
my $pttl = $redis->command('PTTL', $fence);
ok($pttl > 0 && $pttl <= 2000, "for the lease only ($pttl ms left)");
($out) = session_query($s1, "SELECT redis_lock_extend('f', 60000)");
is($out, 't', 'the lease is extended');
cmp_ok($redis->command('PTTL', $fence), '>', 30000, 'and the token\'s with it');
session_query($s1, "SELECT redis_lock_release('f')");

# --- successive holders
my $t2 = token($s2, 'f', 2000);
ok($t2 > $t1, 'the next holder, another backend, gets a larger token');
session_query($s2, "SELECT redis_lock_release('f')");
my $t3 = token($s1, 'f', 2000);
ok($t3 > $t2, 'and the one after it a larger one still');
session_query($s1, "SELECT redis_lock_release('f')");

ok(defined wait_until(10, sub { $redis->command('EXISTS', $fence) eq '0' }),
	'the token goes once the lease has passed');
my $t4 = token($s2, 'f', 2000);
ok($t4 > $t3, 'a holder after the key was free past its lease gets a larger token');
session_query($s2, "SELECT redis_lock_release('f')");

$redis->restart;
my $t5 = token($s1, 'f', 2000);
ok($t5 > $t4, 'and so does one after a Redis restart that lost every key');
session_query($s1, "SELECT redis_lock_release('f')");

my $ahead = redis_micros() + 1_000_000_000_000;
$redis->command('SET', $fence, "$ahead", 'PX', '60000');
my $t6 = token($s2, 'f', 2000);
is("$t6", "" . ($ahead + 1), 'a last token ahead of the clock is followed by the next integer');
session_query($s2, "SELECT redis_lock_release('f')");

# Beyond 2^53 a double cannot tell neighbours apart: the token must still
# be the next integer.
$redis->command('SET', $fence, '9007199254740993', 'PX', '60000');
my $t7 = token($s2, 'f', 2000);
is("$t7", '9007199254740994', 'a last token beyond 2^53 is followed by the next integer, exactly');
session_query($s2, "SELECT redis_lock_release('f')");

# --- an acquire that fails leaves no lock
token($s1, 'o', 60000);
session_query($s1, "SELECT redis_lock_release('o')");
my $ofence = $redis->sibling('', 'fence', 'o') // 'no-sibling';
is($redis->command('SET', $ofence, 'garbage', 'KEEPTTL'), 'OK',
	'the fence sibling of "o" is made to hold a non-integer');

($out, $err) = session_query($s1, "SELECT redis_lock_acquire_session('o', 60000)");
like($err, qr/ERROR:.*"o"/, 'a session acquire fails, naming the key');
is($redis->command('EXISTS', 'o'), '0', 'and leaves no lock key');
($out, $err) = session_query($s1, "BEGIN; SELECT redis_lock_acquire('o', 60000)");
like($err, qr/ERROR:.*"o"/, 'a transaction acquire fails too');
session_query($s1, 'ROLLBACK');
is($redis->command('EXISTS', 'o'), '0', 'and leaves no lock key either');
is($redis->command('GET', $ofence), 'garbage', 'the sibling was not written');
($out) = session_query($s1, 'SELECT count(*) FROM redis_locks()');
is($out, '0', 'the backend holds nothing');

$redis->command('DEL', $ofence);
($out, $err) = session_query($s1, "SELECT redis_lock_acquire_session('o', 60000)");
is("$out$err", 't', 'once the sibling is gone the lock can be taken');
is($redis->command('EXISTS', 'o'), '1', 'and is in Redis');

$s1->quit;
$s2->quit;
$node->stop;
$redis->stop;

done_testing();
