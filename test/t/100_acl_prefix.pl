# A Redis ACL user confined to the server's key prefix (~shop:* with
# key_prefix 'shop:') can use every SQL function: locks of both scopes,
# release, release_all, extend, fence, redis_locks, stock set, get, incr and
# decr (with and without a buyer), the give-back at rollback, delete and
# recover.  Every key the extension writes, the ones it keeps beside locks
# and stock included, starts with the prefix; a key outside it would be
# refused with NOPERM.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('acl', $redis);
my $port = $redis->port;

is( $redis->cli(
		'ACL', 'SETUSER', 'shopper', 'on', '>pw', 'resetkeys', '~shop:*',
		'+@all', '-@dangerous'),
	'OK',
	'Redis user "shopper" may use keys shop:* only, and no dangerous command');
$node->safe_psql(
	'postgres', qq{
	CREATE SERVER shop FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$port', key_prefix 'shop:');
	CREATE USER MAPPING FOR PUBLIC SERVER shop
		OPTIONS (username 'shopper', password 'pw');
	GRANT USAGE ON FOREIGN SERVER shop TO PUBLIC;
	ALTER DATABASE postgres SET redislock.server = shop;
});
my $sysid = $node->safe_psql('postgres',
	'SELECT system_identifier FROM pg_control_system()');

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s->set_query_timer_restart;
my $other = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);

# Every key seen in Redis during the test.
my %seen;

# Run $sql in the session, check its output and that it raised nothing,
# and note the keys Redis holds afterwards.
sub works
{
	my ($sql, $expected, $name) = @_;
	my ($out, $err) = session_query($s, $sql);
	is($out, $expected, $name);
	is($err, '', "$name: no error");
	$seen{$_} = 1 foreach $redis->keys;
	return;
}

# --- locks
works("SELECT redis_lock_acquire_session('s1', 30000)", 't', 'session acquire');
works("SELECT redis_lock_fence('s1') > 0", 't', 'fence');
works("SELECT redis_lock_extend('s1', 60000)", 't', 'extend');
works(
	"BEGIN; SELECT redis_lock_acquire('t1', 30000);"
	  . " SELECT key, scope, holds FROM redis_locks() ORDER BY key",
	"t\ns1|session|1\nt1|transaction|1",
	'transaction acquire and redis_locks');
works('COMMIT', '', 'commit with a transaction lock');
is($redis->cli('EXISTS', 'shop:t1'), '0', 'the transaction lock is released at commit');
works("SELECT redis_lock_release('s1')", 't', 'release');
works(
	"SELECT redis_lock_acquire_session('s2'), redis_lock_acquire_session('s3');"
	  . ' SELECT redis_lock_release_all()',
	"t|t\n2", 'release_all');
is($redis->cli('EXISTS', 'shop:s1', 'shop:s2', 'shop:s3'), '0', 'no lock is left');
like($redis->cli('CLIENT', 'LIST'), qr/\buser=shopper\b/,
	'the session talks to Redis as "shopper"');

# --- stock
works("SELECT redis_stock_set('item', 10)", '', 'stock set');
works("SELECT redis_stock_get('item')", '10', 'stock get');
works("SELECT redis_stock_incr('item', 5)", '15', 'stock incr');
works("SELECT redis_stock_decr('item')", '14', 'decrement without buyer');
works("SELECT redis_stock_decr('item', 2, 'alice')", '12', 'decrement with a buyer');
works("SELECT redis_stock_decr('item', 1, 'alice')", '-2', 'a buyer buys once');
works("BEGIN; SELECT redis_stock_decr('item', 3, 'bob')", '9', 'decrement in a transaction');
works("ROLLBACK; SELECT redis_stock_get('item')", '12', 'given back at rollback');
works("SELECT redis_stock_decr('item', 1, 'bob')", '11', 'and the buyer may buy again');

# --- recover: a record of a transaction that did not commit, as a crash
# leaves one, and one of a transaction in progress elsewhere.
my $aborted = $node->safe_psql('postgres',
	'BEGIN; SELECT pg_current_xact_id(); ROLLBACK');
my ($out, $err) = session_query($other,
	"BEGIN; SELECT redis_stock_decr('item', 4, 'carol')");
is($out, '7', 'another session decrements in an open transaction');
my $ops = $redis->sibling('shop:', 'ops', 'item');
ok(defined $ops, 'the decrement is recorded beside the stock, inside the prefix');
$redis->cli('HSET', $ops, "$sysid:1:$aborted:1", '2 dave');
$redis->cli('DECRBY', 'shop:item', '2');
$redis->cli('SADD', $redis->sibling('shop:', 'buyers', 'item'), 'dave');
works(
	'SELECT key, xid, qty, buyer, outcome FROM redis_stock_recover() ORDER BY xid',
	"item|$aborted|2|dave|aborted\n" . "item|"
	  . (session_query($other, 'SELECT pg_current_xact_id()'))[0]
	  . "|4|carol|in progress",
	'recover gives back what did not commit and leaves what is in progress');
works("SELECT redis_stock_get('item')", '7', 'the aborted record\'s units are back');
works("SELECT redis_stock_decr('item', 1, 'dave')", '6', 'and its buyer may buy again');
session_query($other, 'COMMIT');

# --- delete
works("SELECT redis_stock_delete('item')", 't', 'stock delete');
is(join(' ', grep { /item/ } $redis->keys), '', 'nothing of the item is left');

my @outside = grep { !/\Ashop:/ } sort keys %seen;
cmp_ok(scalar keys %seen, '>=', 4, 'keys were written');
is("@outside", '', 'every key written starts with the prefix');
like($redis->cli('ACL', 'LOG'), qr/\A\z|\A\(empty/,
	'and Redis logged no refused access');

$s->quit;
$other->quit;
$node->stop;
$redis->stop;

done_testing();
