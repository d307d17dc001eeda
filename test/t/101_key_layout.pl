# Where the extension's keys live, on a one-node Redis Cluster serving
# every slot, which refuses a script whose keys span slots (CROSSSLOT):
# - what it keeps beside a lock or an item (fencing token, buyers, decrement
#   records) is a sibling <prefix>{<tag>}:<kind>:<key>, inside the prefix,
#   in the Cluster slot of <prefix><key> (CRC16 of the hash tag, computed
#   here and checked against CLUSTER KEYSLOT), whatever the key holds,
#   braces included, also under a prefix that holds a hash tag itself;
# - such a sibling cannot be named as a key of the user's (22023), while
#   the same name with another tag can;
# - a key_prefix whose '{' does not open a complete, non-empty tag is
#   refused (HV024), since its keys could not share a slot with siblings;
# - nothing outlives its purpose: after 20,000 distinct keys are locked and
#   released, and an item is sold and deleted, DBSIZE is back where it
#   started once the leases have passed.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval);
use RedisLockTest qw(session_query wait_until key_slot);

my $redis = RedisLockTest->start_redis(
	args => [
		'--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf',
		'--cluster-node-timeout', '500',
		# a free bus port, rather than the default port + 10000
		'--cluster-port', PostgreSQL::Test::Cluster::get_free_port()
	]);
$redis->command('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
ok(defined wait_until(10, sub { $redis->command('CLUSTER', 'INFO') =~ /cluster_state:ok/ }),
	'a one-node Redis Cluster serves every slot');
is($redis->command('CLUSTER', 'KEYSLOT', '123456789'), key_slot('123456789'),
	'our CRC16 agrees with Redis');

my $node = RedisLockTest->new_node('layout', $redis);
my $port = $redis->port;
$node->safe_psql(
	'postgres', qq{
	CREATE SERVER pre FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$port', key_prefix 'p:');
	CREATE SERVER tenant FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$port', key_prefix '{tenant}:');
	GRANT USAGE ON FOREIGN SERVER pre, tenant TO PUBLIC;
});

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 120);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
my ($out, $err);

# --- prefixes that cannot share a slot with siblings are refused
foreach my $bad ('x{', 'a{}', '{}x', 'a{b')
{
	($out, $err) = session_query($s,
		"CREATE SERVER bad FOREIGN DATA WRAPPER redislock OPTIONS (key_prefix '$bad')");
	like($err, qr/ERROR:\s+HV024: invalid value for option "key_prefix"/,
		"CREATE SERVER refuses key_prefix '$bad'");
}
($out, $err) = session_query($s, "ALTER SERVER pre OPTIONS (SET key_prefix 'q{')");
like($err, qr/ERROR:\s+HV024: /, 'ALTER SERVER refuses an unclosed tag too');
($out) = session_query($s,
	"SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'pre'");
like($out, qr/key_prefix=p:[,}]/, 'and the server keeps its prefix');

# --- siblings in the prefix and in the key's slot
# Check that $kind's sibling of $prefix$key exists, inside the prefix, in
# the slot of $prefix$key by our CRC16 and by Redis' own; return it.
sub sibling_in_slot
{
	my ($prefix, $kind, $key) = @_;
	my $sibling = $redis->sibling($prefix, $kind, $key);
	ok(defined $sibling, "'$prefix' '$key': a $kind sibling inside the prefix");
	$sibling //= '';
	my $slot = key_slot($prefix . $key);
	is(key_slot($sibling), $slot, "'$prefix' '$key': $kind sibling in the key's slot");
	is($redis->command('CLUSTER', 'KEYSLOT', $sibling), $slot,
		"'$prefix' '$key': $kind sibling in the key's slot, says Redis");
	return $sibling;
}

# Check that $sibling, which redislock keeps beside $prefix$key, cannot be
# named as a key of the user's (22023), while the same name with another
# tag can.
sub not_a_user_key
{
	my ($prefix, $sibling, $key) = @_;
	my $own = substr($sibling, length $prefix) =~ s/'/''/gr;
	my ($kind) = $sibling =~ /\}:([a-z]+):/;
	($out, $err) = session_query($s, "SELECT redis_stock_get('$own')");
	like($err, qr/ERROR:\s+22023: Redis key ".*" is reserved/s,
		"'$prefix' '$key': its $kind sibling is refused as a user's key");
	$own =~ s/\A\{([0-9]+)\}/'{' . ($1 + 1) . '}'/e;
	($out, $err) = session_query($s, "SELECT redis_stock_get('$own') IS NULL");
	is("$out$err", 't', "'$prefix' '$key': another tag is a key like any other");
	return;
}

my %prefix = (redislock => '', pre => 'p:', tenant => '{tenant}:');
foreach my $server (sort keys %prefix)
{
	my $prefix = $prefix{$server};
	session_query($s, "SET redislock.server = $server");
	foreach my $key ('plain', '{a}b', 'a}b', '{}x', '{', 'x{y}z{w}', 'a{b')
	{
		my $lit = $key =~ s/'/''/gr;
		($out, $err) = session_query($s,
			"SELECT redis_lock_acquire_session('$lit', 60000), redis_lock_fence('$lit') > 0");
		is("$out$err", 't|t', "'$prefix' '$key': lock taken, with a fencing token");
		is($redis->command('EXISTS', $prefix . $key), '1', "'$prefix' '$key': the lock key is prefix || key");
		my @siblings = sibling_in_slot($prefix, 'fence', $key);
		session_query($s, "SELECT redis_lock_release('$lit')");

		($out, $err) = session_query($s,
			"SELECT redis_stock_set('$lit', 5); BEGIN; SELECT redis_stock_decr('$lit', 1, 'b')");
		is("$out$err", "\n4", "'$prefix' '$key': decrement with a buyer");
		is($redis->command('GET', $prefix . $key), '4', "'$prefix' '$key': the stock key is prefix || key");
		push @siblings, sibling_in_slot($prefix, $_, $key) foreach ('buyers', 'ops');
		session_query($s, 'COMMIT');
		not_a_user_key($prefix, $_, $key) foreach @siblings;
	}
}
session_query($s, 'RESET redislock.server');

# --- nothing left behind
$redis->command('FLUSHALL');
my $baseline = $redis->command('DBSIZE');
is($baseline, '0', 'an empty data set to start from');

($out, $err) = session_query($s, "SELECT redis_stock_set('item', 10)");
($out, $err) = session_query($s,
	"SELECT redis_stock_decr('item', 1, 'b' || g) FROM generate_series(1, 3) g");
is($out, "9\n8\n7", 'three committed decrements with buyers');
ok(defined $redis->sibling('', 'ops', 'item'),
	'their records wait for the session\'s next command');
($out) = session_query($s, "SELECT redis_stock_get('item')");
is($out, '7', 'which reads the stock');
ok(!defined $redis->sibling('', 'ops', 'item'), 'and clears them first');
($out) = session_query($s, "SELECT redis_stock_delete('item')");
is($out, 't', 'the item is deleted');
is($redis->command('DBSIZE'), $baseline, 'nothing of it is left');

my $ttl_ms = 10000;
my $t0 = [gettimeofday];
($out, $err) = session_query($s,
	"SELECT count(*) FILTER (WHERE redis_lock_acquire_session('d:' || g, $ttl_ms))"
	  . ' FROM generate_series(1, 20000) g; SELECT redis_lock_release_all()');
my $took = tv_interval($t0);
is($out, "20000\n20000", '20,000 distinct keys locked and released');
note("20,000 acquires and one release_all took $took s");
SKIP:
{
	skip 'the leases ran out before the check', 1 if tv_interval($t0) > $ttl_ms / 1000 - 0.5;
	cmp_ok($redis->command('DBSIZE'), '>', $baseline,
		'their fencing tokens are kept while the leases last');
}
ok(defined wait_until(30, sub { $redis->command('DBSIZE') eq $baseline }),
	'DBSIZE is back to where it started once the leases have passed');
note('DBSIZE: ' . $redis->command('DBSIZE') . ", baseline $baseline");

$s->quit;
$node->stop;
$redis->stop;

done_testing();
