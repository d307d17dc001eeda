# Redlock servers (option "redlock"), on one set of 3 independent masters
# that want a password:
# - the option is validated at CREATE and ALTER SERVER: at least 3
#   host:port entries, none malformed, and no host, port, unix_socket,
#   cluster, sentinel or min_replicas beside it;
# - a lock is the same key, key_prefix || key, holding the same owner
#   token on every master; redis_locks() shows its validity, the start of
#   the acquire (or extend) + TTL - drift (1 % of the TTL + 2 ms); the
#   fencing token is the largest of a quorum's and grows from holder to
#   holder; extend renews every master, release and commit clear them all,
#   also on masters whose scripts were flushed;
# - two sessions contend for a key: the second one gets false, or waits and
#   gets it at the first one's commit;
# - a quorum (2 of 3) grants the lock when one master holds the key for
#   someone else; with two such masters it is not granted and our token is
#   left on no master, also after retrying with wait_ms, which gets it as
#   soon as one of them lets go;
# - stock functions are refused (0A000, with a hint) and write nothing;
# - redis_server_nodes() lists the three masters;
# - the user mapping's ACL user and password are used on every master; a
#   minority refusing them still grants, a majority gives 28P01;
# - faults: one master killed, locks are still granted; two killed, or two
#   SIGSTOPped past command_timeout, an ERROR of class 08 naming both,
#   within connect_timeout + command_timeout; one SIGSTOPped, locks are
#   still granted and the median acquire+release pair stays within 2x the
#   healthy one; masters restarted empty under a held lock, COMMIT succeeds
#   while 2 of 3 carry the token and fails with 40001 when only one does.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Math::BigInt;
use Time::HiRes qw(usleep);
use RedisMasters;
use RedlockTest qw(new_redlock_node session works values_on);
use RedisLockTest qw(session_query start_query finish_query wait_for_stderr wait_until);

my $t0 = time;
my $masters = RedisMasters->start_masters(3, password => 'pw');
my @ports = map { $masters->master($_)->port } 0 .. 2;
my @m = map { $masters->master($_) } 0 .. 2;

# A Redis ACL user on every master, which the user mapping of rl names.
$_->command('ACL', 'SETUSER', 'app', 'on', '>apppw', '~*', '+@all') foreach @m;

my $node = new_redlock_node(
	'redlock', $masters,
	key_prefix => 'app:',
	sql        => qq{
	CREATE USER MAPPING FOR PUBLIC SERVER redislock OPTIONS (password 'pw');
	CREATE USER MAPPING FOR PUBLIC SERVER rl OPTIONS (username 'app', password 'apppw');
	CREATE SERVER badpw FOREIGN DATA WRAPPER redislock
		OPTIONS (redlock '${\$masters->endpoints}', key_prefix 'app:');
	CREATE USER MAPPING FOR PUBLIC SERVER badpw OPTIONS (password 'wrong');
	GRANT USAGE ON FOREIGN SERVER badpw TO PUBLIC;
	-- Take and release n session locks one after another, each under a
	-- key of its own; one row per pair: its milliseconds, and whether the
	-- lock was granted and released.
	CREATE FUNCTION lock_pairs(stem text, n int, OUT ms float8, OUT got bool, OUT released bool)
	RETURNS SETOF record LANGUAGE plpgsql AS \$\$
	DECLARE
		t0 timestamptz;
	BEGIN
		FOR i IN 1 .. n LOOP
			t0 := clock_timestamp();
			got := redis_lock_acquire_session(stem || i, 60000);
			released := got AND redis_lock_release(stem || i);
			ms := 1000 * extract(epoch FROM clock_timestamp() - t0);
			RETURN NEXT;
		END LOOP;
	END \$\$;
});

my $s = session($node);
my ($out, $err, $secs);

# --- the option is validated
# Check that CREATE SERVER with $options is refused with FDW error $state
# (a regular expression).
sub refused
{
	my ($options, $state, $name) = @_;
	($out, $err) = session_query($s,
		"CREATE SERVER bad FOREIGN DATA WRAPPER redislock OPTIONS ($options)");
	like($err, qr/ERROR:\s+$state: /, "refused: $name");
	session_query($s, 'DROP SERVER IF EXISTS bad');
	return;
}
my $three = $masters->endpoints;
refused("redlock '$three', host '127.0.0.1'", 'HV\w{3}', 'redlock with host');
refused("redlock '$three', port '$ports[0]'", 'HV\w{3}', 'redlock with port');
refused("redlock '$three', unix_socket '/tmp/redis.sock'", 'HV\w{3}', 'redlock with unix_socket');
refused("redlock '$three', cluster '$three'", 'HV\w{3}', 'redlock with cluster');
refused("redlock '$three', sentinel '$three', sentinel_master 'm'", 'HV\w{3}',
	'redlock with sentinel');
refused("redlock '$three', min_replicas '1'", 'HV\w{3}', 'redlock with min_replicas');
foreach my $list ('', ' ', '127.0.0.1:1', '127.0.0.1:1, 127.0.0.1:2',
	'127.0.0.1:1, 127.0.0.1:2, localhost', '127.0.0.1:1, 127.0.0.1:2, 127.0.0.1:',
	'127.0.0.1:1, 127.0.0.1:2, :7001', '127.0.0.1:1, 127.0.0.1:2, 127.0.0.1:0',
	'127.0.0.1:1, 127.0.0.1:2, 127.0.0.1:65536', '127.0.0.1:1, 127.0.0.1:2, 127.0.0.1:70a1',
	'127.0.0.1:1,,127.0.0.1:2, 127.0.0.1:3')
{
	refused("redlock '$list'", 'HV024', "fewer than 3 masters or a malformed entry: '$list'");
}
works($s,
	"CREATE SERVER five FOREIGN DATA WRAPPER redislock OPTIONS"
	  . " (redlock '10.0.0.1:7000, 10.0.0.2:7000,10.0.0.3:7000, 10.0.0.4:7000, 10.0.0.5:7000');"
	  . " DROP SERVER five",
	'', 'five masters are accepted');
foreach my $alter ("ADD host '127.0.0.1'", "ADD port '6379'", "ADD min_replicas '1'",
	"SET redlock '127.0.0.1:$ports[0], 127.0.0.1:$ports[1]'")
{
	($out, $err) = session_query($s, "ALTER SERVER rl OPTIONS ($alter)");
	like($err, qr/ERROR:\s+HV\w{3}: /, "ALTER SERVER rl OPTIONS ($alter) is refused");
}
($out, $err) = session_query($s, "ALTER SERVER redislock OPTIONS (ADD redlock '$three')");
like($err, qr/ERROR:\s+HV\w{3}: /, 'a server with a port cannot be given redlock');
($out, $err) = session_query($s,
	"CREATE USER MAPPING FOR CURRENT_USER SERVER redislock OPTIONS (redlock '$three')");
like($err, qr/ERROR:\s+HV00D: /, 'redlock is not a user mapping option');
($out) = session_query($s, q{SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'rl'});
is($out, "{\"redlock=$three\",key_prefix=app:}", 'server rl keeps its options');

# --- a lock on every master
# Run $call (an acquire or extend of $key with $ttl ms) and check that
# redis_locks() then shows the validity the call started with:
# between the statement's start and the end of the call, plus $ttl - drift.
sub check_validity
{
	my ($call, $key, $ttl, $what) = @_;
	my $valid = $ttl - int($ttl / 100) - 2;
	session_query($s, 'DROP TABLE IF EXISTS timed');
	works($s,
		"CREATE TEMP TABLE timed AS SELECT statement_timestamp() AS t0, $call AS ok, clock_timestamp() AS t1;"
		  . ' SELECT ok FROM timed',
		't', "$what succeeds");
	($out, $err) = session_query($s,
		"SELECT lease_expires_at BETWEEN t0 + interval '$valid ms' AND t1 + interval '$valid ms',"
		  . " round(1000 * extract(epoch FROM lease_expires_at - t0))"
		  . " FROM timed, redis_locks() WHERE key = '$key'");
	like("$out$err", qr/^t\|/,
		"$what: the lease ends at its start + TTL - drift ($valid ms; it ends "
		  . ((split /\|/, $out)[1] // '?') . ' ms after the statement started)');
	return;
}

check_validity("redis_lock_acquire_session('k1', 60000)", 'k1', 60000, 'a session acquire');
my @tokens = values_on($masters, 'app:k1');
ok($tokens[0] =~ /^pg:/ && !(grep { $_ ne $tokens[0] } @tokens),
	"every master holds key_prefix || key with the same owner token ($tokens[0])");
my @pttl = map { $_->command('PTTL', 'app:k1') } @m;
ok(!(grep { $_ <= 55000 || $_ > 60000 } @pttl), "each for the TTL (@pttl ms left)");
works($s, "SELECT key, scope, holds FROM redis_locks()", 'k1|session|1', 'redis_locks() shows it');

my @fences = map { $_->command('GET', $_->sibling('app:', 'fence', 'k1') // 'none') // 'nil' } @m;
my @sorted = sort { $b <=> $a } map { Math::BigInt->new($_) } grep { /^[0-9]+$/ } @fences;
($out, $err) = session_query($s, "SELECT redis_lock_fence('k1')");
ok(@sorted == 3 && (grep { $_ == $out } @sorted) && $out >= $sorted[1],
	"the fencing token is the largest of a quorum's: one of the masters' and at least the second largest ($out of @fences)");

check_validity("redis_lock_extend('k1', 120000)", 'k1', 120000, 'extend');
@pttl = map { $_->command('PTTL', 'app:k1') } @m;
ok(!(grep { $_ <= 115000 } @pttl), "extend renews every master (@pttl ms left)");
works($s, "SELECT redis_lock_release('k1')", 't', 'release');
is(join(' ', values_on($masters, 'app:k1')), 'nil nil nil', 'the key is gone from every master');

works($s, "BEGIN; SELECT redis_lock_acquire('k2', 60000)", 't', 'a transaction lock');
@tokens = values_on($masters, 'app:k2');
ok($tokens[0] =~ /^pg:/ && !(grep { $_ ne $tokens[0] } @tokens), 'is on every master');
works($s, 'COMMIT', '', 'the transaction commits (the check before commit passes)');
is(join(' ', values_on($masters, 'app:k2')), 'nil nil nil', 'and the lock is released everywhere');

# --- fencing tokens grow from holder to holder
my $s2 = session($node);
my ($pid2) = session_query($s2, 'SELECT pg_backend_pid()');

# Take session lock $key in session $sess, release it and return the
# fencing token it had, as a Math::BigInt (NaN if the acquire failed).
sub token_of_a_hold
{
	my ($sess, $key) = @_;
	my ($token) = session_query($sess,
		"SELECT redis_lock_fence('$key') FROM redis_lock_acquire_session('$key', 60000) AS got WHERE got");
	session_query($sess, "SELECT redis_lock_release('$key')");
	return Math::BigInt->new($token);
}
my @holds = map { token_of_a_hold($_, 'f') } ($s, $s2, $s);
ok($holds[0] > 0 && $holds[1] > $holds[0] && $holds[2] > $holds[1],
	"acquire/release/acquire of one key: increasing tokens (@holds)");

# --- contention between two sessions
works($s, "BEGIN; SELECT redis_lock_acquire('hot', 60000)", 't', 'session 1 locks "hot"');
my ($token1) = values_on($masters, 'app:hot');
works($s2, "SELECT redis_lock_acquire('hot', 60000)", 'f', 'session 2 does not get it');
is(join(' ', values_on($masters, 'app:hot')), join(' ', ($token1) x 3),
	'and its attempt left session 1\'s token on every master');
start_query($s2, "BEGIN; SELECT redis_lock_acquire('hot', 60000, 20000)");
usleep(500_000);
is( $node->safe_psql('postgres', "SELECT state FROM pg_stat_activity WHERE pid = $pid2"),
	'active', 'session 2 waits for "hot"');
works($s, 'COMMIT', '', 'session 1 commits');
($out, $err) = finish_query($s2, 30);
is("$out$err", 't', 'session 2 gets "hot"');
@tokens = values_on($masters, 'app:hot');
my $token2 = $tokens[0];
ok($token2 =~ /^pg:/ && $token2 ne $token1 && !(grep { $_ ne $token2 } @tokens),
	'every master holds session 2\'s token');
works($s2, 'COMMIT', '', 'session 2 commits');
is(join(' ', values_on($masters, 'app:hot')), 'nil nil nil', 'and releases it everywhere');

# --- a quorum, with masters holding the key for someone else
$m[0]->command('SET', 'app:q', 'someone-else', 'PX', 60000);
works($s, "SELECT redis_lock_acquire_session('q', 60000)", 't',
	'one master holds the key for someone else: granted by the other two');
@tokens = values_on($masters, 'app:q');
ok($tokens[0] eq 'someone-else' && $tokens[1] =~ /^pg:/ && $tokens[2] eq $tokens[1],
	'the two hold our token, the third still the other owner\'s');
works($s, "SELECT redis_lock_release('q')", 't', 'release confirmed by the two');
is(join(' ', values_on($masters, 'app:q')), 'someone-else nil nil',
	'which drop it; the other owner\'s key stays');

$m[1]->command('SET', 'app:q', 'someone-else', 'PX', 60000);
works($s, "SELECT redis_lock_acquire_session('q', 60000)", 'f',
	'two masters hold the key for someone else: not granted');
ok( defined wait_until(5, sub { join(' ', values_on($masters, 'app:q')) eq 'someone-else someone-else nil' }),
	'our token is left on no master: ' . join(' ', values_on($masters, 'app:q')));
works($s, 'SELECT count(*) FROM redis_locks()', '0', 'the backend holds nothing');
($out, $err, $secs) = session_query($s, "SELECT redis_lock_acquire_session('q', 60000, 500)");
is("$out$err", 'f', 'nor after retrying for wait_ms 500');
ok($secs >= 0.45 && $secs < 10, sprintf('which waited about wait_ms (%.2f s)', $secs));
ok( defined wait_until(5, sub { join(' ', values_on($masters, 'app:q')) eq 'someone-else someone-else nil' }),
	'and left our token on no master either');
start_query($s, "SELECT redis_lock_acquire_session('q', 60000, 20000)");
usleep(300_000);
$m[1]->command('DEL', 'app:q');
($out, $err, $secs) = finish_query($s, 30);
is("$out$err", 't', 'waiting, it is granted once one of the two lets go');
@tokens = values_on($masters, 'app:q');
ok($tokens[0] eq 'someone-else' && $tokens[1] =~ /^pg:/ && $tokens[2] eq $tokens[1],
	'by the two free masters');
works($s, "SELECT redis_lock_release('q')", 't', 'and released');
$m[0]->command('DEL', 'app:q');

# A lease lost on masters: extend and release need a quorum confirming it.
works($s, "SELECT redis_lock_acquire_session('e', 60000)", 't', 'lock "e" is taken');
$m[0]->command('DEL', 'app:e');
works($s, "SELECT redis_lock_extend('e', 120000)", 't', 'its key deleted on one master: extend succeeds');
@pttl = map { $_->command('PTTL', 'app:e') } @m;
ok($pttl[0] == -2 && $pttl[1] > 60000 && $pttl[2] > 60000,
	"renewing the two that carry it (@pttl ms left)");
$m[1]->command('DEL', 'app:e');
($out, $err) = session_query($s, "SELECT redis_lock_extend('e', 120000)");
ok($out eq 'f' && $err =~ /WARNING:/, 'deleted on two: extend returns false, with a warning');
($out, $err) = session_query($s, "SELECT redis_lock_release('e')");
ok($out eq 'f' && $err =~ /WARNING:/, 'and so does release');
ok(defined wait_until(5, sub { join(' ', values_on($masters, 'app:e')) eq 'nil nil nil' }),
	'which still deletes the key where it carries our token');
works($s, 'SELECT count(*) FROM redis_locks()', '0', 'the backend holds nothing');

# --- stock is refused
foreach my $call ("redis_stock_set('st', 5)", "redis_stock_get('st')", "redis_stock_decr('st')",
	"redis_stock_incr('st', 2)", "redis_stock_delete('st')", 'redis_stock_recover()')
{
	($out, $err) = session_query($s, "SELECT $call");
	ok($err =~ /ERROR:\s+0A000: / && $err =~ /\nHINT: /, "$call is refused with 0A000 and a hint")
	  or diag $err;
}
is(join(' ', map { my @keys = $_->keys('app:*st'); scalar @keys } @m), '0 0 0', 'no stock key was written');

# --- redis_server_nodes()
works($s, "SELECT endpoint, role FROM redis_server_nodes('rl') ORDER BY endpoint",
	join("\n", map { "127.0.0.1:$_|master" } sort @ports), 'redis_server_nodes: the three masters');
($out, $err) = session_query($s,
	q{SELECT (SELECT array_agg(n ORDER BY n::text) FROM redis_server_nodes() n)
	       = (SELECT array_agg(n ORDER BY n::text) FROM redis_server_nodes('rl') n)});
is("$out$err", 't', 'redis_server_nodes() shows the current server');

# --- credentials on every master
like($_->command('CLIENT', 'LIST'), qr/\buser=app\b/, 'port ' . $_->port . ': a session is user "app"')
  foreach @m;
session_query($s, 'SET redislock.server = badpw');
($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('a', 60000)");
like($err, qr/ERROR:\s+28P01: /, 'a wrong password on every master: 28P01');
session_query($s, 'RESET redislock.server');
$m[2]->command('ACL', 'SETUSER', 'app', 'resetpass', '>other');
session_query($s, "SELECT redis_disconnect('rl')");
works($s, "SELECT redis_lock_acquire_session('a', 60000)", 't',
	'one master refusing the password: still granted');
@tokens = values_on($masters, 'app:a');
ok($tokens[0] =~ /^pg:/ && $tokens[1] eq $tokens[0] && $tokens[2] eq 'nil', 'by the other two');
works($s, "SELECT redis_lock_release('a')", 't', 'and released');
$m[1]->command('ACL', 'SETUSER', 'app', 'resetpass', '>other');
session_query($s, "SELECT redis_disconnect('rl')");
($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('a', 60000)");
like($err, qr/ERROR:\s+28P01: /, 'two masters refusing it: 28P01');
ok(defined wait_until(5, sub { join(' ', values_on($masters, 'app:a')) eq 'nil nil nil' }),
	'and no lock is left');
$_->command('ACL', 'SETUSER', 'app', 'resetpass', '>apppw') foreach @m[ 1, 2 ];
session_query($s, "SELECT redis_disconnect('rl')");
works($s, "SELECT redis_lock_acquire_session('a', 60000), redis_lock_release('a')", 't|t',
	'with the password back, the session goes on');

# --- scripts flushed on masters (as a restart does) are loaded again on
# each of them
$_->command('SCRIPT', 'FLUSH') foreach @m[ 1, 2 ];
works($s, "SELECT redis_lock_acquire_session('sf', 60000)", 't',
	'scripts flushed on two masters: a lock is granted');
@tokens = values_on($masters, 'app:sf');
ok($tokens[0] =~ /^pg:/ && !(grep { $_ ne $tokens[0] } @tokens), 'and is on every master')
  or diag "@tokens";
$_->command('SCRIPT', 'FLUSH') foreach @m[ 0, 1 ];
works($s, "SELECT redis_lock_extend('sf', 120000)", 't', 'flushed again: extend succeeds');
@pttl = map { $_->command('PTTL', 'app:sf') } @m;
ok(!(grep { $_ <= 115000 } @pttl), "on every master (@pttl ms left)");
$_->command('SCRIPT', 'FLUSH') foreach @m[ 0, 2 ];
works($s, "SELECT redis_lock_release('sf')", 't', 'flushed again: release succeeds');
is(join(' ', values_on($masters, 'app:sf')), 'nil nil nil', 'on every master');

# --- faults
my $limit = 1 + 1 + 3;    # connect_timeout + command_timeout, in s, plus slack
session_query($s, 'SET redislock.connect_timeout = 1000; SET redislock.command_timeout = 1000');
works($s, "SELECT redis_lock_acquire_session('warm', 5000), redis_lock_release('warm')", 't|t',
	'all masters are connected');

# Run $sql, expected to fail with an ERROR of class 08 naming the masters
# on @down ($what says why); check that the error came within $limit and
# that the acquire left no lock on the masters of @up.
sub unreachable
{
	my ($sql, $key, $what, $down, $up) = @_;
	start_query($s, $sql);
	my $at = wait_for_stderr($s, qr/ERROR:/, 30);
	my ($out, $err, $rest) = finish_query($s, 30);
	like($err, qr/ERROR:\s+08\w{3}: /, "$what: an ERROR of class 08");
	ok(!(grep { $err !~ /127\.0\.0\.1:$_\b/ } @$down), "$what: it names the unreachable masters")
	  or diag $err;
	ok(defined $at && $at < $limit,
		sprintf('%s: within connect_timeout + command_timeout (%.2f s; the statement ended after %.2f s)',
			$what, $at // -1, ($at // 0) + $rest));
	ok(defined wait_until(5, sub { !grep { $masters->master($_)->command('EXISTS', "app:$key") } @$up }),
		"$what: no lock is left on the masters that answered");
	return;
}

# One master killed
$m[2]->kill9;
works($s, "SELECT redis_lock_acquire_session('d1', 60000)", 't', 'one master killed: a lock is granted');
is(join(' ', map { $_ =~ /^pg:/ ? 'pg' : $_ } values_on($masters, 'app:d1')), 'pg pg down',
	'by the two others');
works($s, "SELECT redis_lock_extend('d1', 60000), redis_lock_release('d1')", 't|t',
	'and extended and released');
works($s, "BEGIN; SELECT redis_lock_acquire('d2', 60000); COMMIT", 't',
	'a transaction lock is taken and committed');
is(join(' ', values_on($masters, 'app:d2')), 'nil nil down', 'and released');

# Two masters killed
$m[1]->kill9;
unreachable("SELECT redis_lock_acquire_session('d3', 60000)", 'd3', 'two masters killed',
	[ @ports[ 1, 2 ] ], [0]);
works($s, 'SELECT count(*) FROM redis_locks()', '0', 'the backend holds nothing and is usable');
$_->restart foreach @m[ 1, 2 ];
$_->command('ACL', 'SETUSER', 'app', 'on', '>apppw', '~*', '+@all') foreach @m[ 1, 2 ];
works($s, "SELECT redis_lock_acquire_session('d4', 60000), redis_lock_release('d4')", 't|t',
	'with the masters back, locks are granted again');

# Two masters silent (SIGSTOP) past command_timeout
$_->pause foreach @m[ 1, 2 ];
unreachable("SELECT redis_lock_acquire_session('d5', 60000)", 'd5', 'two masters stopped',
	[ @ports[ 1, 2 ] ], [0]);
$_->resume foreach @m[ 1, 2 ];
ok(defined wait_until(10, sub { !grep { $_->command('EXISTS', 'app:d5') } @m }),
	'once they go on, what they granted late is released too');
works($s, "SELECT redis_lock_acquire_session('d6', 60000), redis_lock_release('d6')", 't|t',
	'and locks are granted again');

# One master silent: it does not hold back an acquire or a release.
session_query($s, 'SET redislock.command_timeout = 3000');
works($s, "SELECT count(*) FROM lock_pairs('warm', 5)", '5', 'warm-up');

# Median milliseconds of $n acquire+release pairs on keys "$stem<i>", and
# whether each was granted and released, and the slowest pair.
sub pairs
{
	my ($stem, $n) = @_;
	my ($out, $err) = session_query($s,
		"SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 3),"
		  . " count(*) FILTER (WHERE got AND released), round(max(ms)::numeric, 3)"
		  . " FROM lock_pairs('$stem', $n)");
	diag $err if $err ne '';
	return split /\|/, $out;
}
my $npairs = 40;
my ($healthy, $healthy_ok, $healthy_max) = pairs('lat', $npairs);
is($healthy_ok, $npairs, "healthy: $npairs pairs granted and released (median $healthy ms)");
$m[1]->pause;
my ($stalled, $stalled_ok, $stalled_max) = pairs('stall', $npairs);
is($stalled_ok, $npairs, "one master stopped: $npairs pairs granted and released (median $stalled ms)");
diag "acquire+release pair, median of $npairs: healthy $healthy ms, one master stopped $stalled ms;"
  . " slowest: $healthy_max and $stalled_max ms";
cmp_ok($stalled_max, '<', 3000, 'no pair waited for the stopped master (command_timeout 3000 ms)');
cmp_ok($stalled, '<=', 2 * $healthy, 'the median pair stays within 2x the healthy one');
$m[1]->resume;
ok(defined wait_until(10, sub { my @keys = $m[1]->keys('app:stall*'); !@keys }),
	'once it goes on, it is left without any of those locks');
session_query($s, 'SET redislock.command_timeout = 1000');

# Masters restarted empty while a transaction holds a lock
works($s, "BEGIN; SELECT redis_lock_acquire('r1', 60000)", 't', 'a transaction holds r1');
$m[0]->kill9;
$m[0]->restart;
$m[0]->command('ACL', 'SETUSER', 'app', 'on', '>apppw', '~*', '+@all');
is(join(' ', map { $_ =~ /^pg:/ ? 'pg' : $_ } values_on($masters, 'app:r1')), 'nil pg pg',
	'one master restarted empty');
works($s, 'COMMIT', '', 'COMMIT succeeds: 2 of 3 still carry the token');
is(join(' ', values_on($masters, 'app:r1')), 'nil nil nil', 'and releases it');

works($s, "BEGIN; SELECT redis_lock_acquire('r2', 60000)", 't', 'a transaction holds r2');
foreach my $master (@m[ 0, 1 ])
{
	$master->kill9;
	$master->restart;
	$master->command('ACL', 'SETUSER', 'app', 'on', '>apppw', '~*', '+@all');
}
is(join(' ', map { $_ =~ /^pg:/ ? 'pg' : $_ } values_on($masters, 'app:r2')), 'nil nil pg',
	'two masters restarted empty');
($out, $err) = session_query($s, 'COMMIT');
like($err, qr/ERROR:\s+40001: /, 'COMMIT fails with 40001: only one carries the token');
ok(defined wait_until(5, sub { join(' ', values_on($masters, 'app:r2')) eq 'nil nil nil' }),
	'and the abort releases it there');
works($s, "SELECT redis_lock_acquire_session('r3', 60000), redis_lock_release('r3')", 't|t',
	'the session goes on');
diag sprintf 'whole test took %d s', time - $t0;

$s->quit;
$s2->quit;
$node->stop;

done_testing();
