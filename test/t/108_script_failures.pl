# A script that fails part way leaves nothing behind, or only what the
# way back from it settles.  Redis keeps a failing script's earlier writes,
# and a Redis ACL can deny any command a script runs.
# - A decrement whose record cannot be written (the records key holds a
#   string, or the Redis user may not HSET; Redis 7 and 8 word the refusal
#   differently) fails and leaves the stock
#   whole, no record and the buyer free to buy; so does one whose buyer
#   cannot be marked (no SADD).
# - When the undo fails too (no SADD, no HDEL), the decrement's record
#   stays with its units, and redis_stock_recover() gives them back.
# - A give-back that cannot free the buyer (no SREM) gives back nothing and
#   keeps the record; redis_stock_recover() gives back units and buyer.
# - An acquire whose fencing token has no successor below 2^63 fails and
#   leaves no lock; a Redis user without INCR and PEXPIRE takes locks, and
#   the token after 1099999999999999999 is 1100000000000000000.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session session_query works key_slot);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('failures', $redis);
my $port = $redis->port;

# A server per Redis user, each denied the commands named after it.
my %denied = (
	no_hset => ['-hset'],
	no_sadd => ['-sadd'],
	no_sadd_hdel => [ '-sadd', '-hdel' ],
	no_srem => ['-srem'],
	no_incr => [ '-incr', '-pexpire' ]);
foreach my $user (sort keys %denied)
{
	$redis->command('ACL', 'SETUSER', $user, 'on', '>pw', '~*', '+@all',
		@{ $denied{$user} });
	$node->safe_psql(
		'postgres', qq{
		CREATE SERVER $user FOREIGN DATA WRAPPER redislock
			OPTIONS (host '127.0.0.1', port '$port');
		CREATE USER MAPPING FOR PUBLIC SERVER $user
			OPTIONS (username '$user', password 'pw');
	});
}

my $s = session($node);
my ($out, $err);

# The smallest number whose digits hash to the Cluster slot of $key: the
# tag of what redislock keeps beside $key (with an empty key prefix).
my %tags;

sub slot_tag
{
	my ($key) = @_;
	my $slot = key_slot($key);
	my $n = 0;
	return $tags{$key} //= do { $n++ while key_slot($n) != $slot; $n };
}

# The state of item $key: its stock, its records and its buyers.
sub item
{
	my ($key) = @_;
	my $tag = slot_tag($key);
	return join ' | ', $redis->command('GET', $key) // 'nil',
	  join(',', map { s/\A(?:[0-9]+:){5}[0-9]+\z/op/r }
		  @{ $redis->command('HGETALL', "{$tag}:ops:$key") }),
	  join(',', sort @{ $redis->command('SMEMBERS', "{$tag}:buyers:$key") });
}

# --- a decrement that fails after taking the units
$redis->command('SET', 'wrong', '10');
$redis->command('SET', '{' . slot_tag('wrong') . '}:ops:wrong', 'not a hash');
($out, $err) = session_query($s, "SELECT redis_stock_decr('wrong', 1, 'alice')");
like($err, qr/ERROR:\s+42809: /, 'a records key of the wrong type: ERROR 42809');
is($redis->command('GET', 'wrong'), '10', 'and the stock is whole');
is($redis->command('SCARD', '{' . slot_tag('wrong') . '}:buyers:wrong'), '0',
	'and the buyer is not marked');

$redis->command('SET', 'item', '10');
foreach my $case (
	[ 'no_hset', "redis_stock_decr('item', 2)" ],
	[ 'no_sadd', "redis_stock_decr('item', 2, 'bob')" ])
{
	my ($server, $call) = @$case;
	session_query($s, "SET redislock.server = $server");
	($out, $err) = session_query($s, "SELECT $call");
	like($err, qr/ERROR:.*(?:can't run this command|has no permissions to run)/s, "$server: $call fails");
	is(item('item'), '10 |  | ', "$server: the stock is whole, no record, no buyer");
}
works($s, "SELECT redis_stock_decr('item', 2)", '8',
	'no_sadd: a decrement without a buyer needs no SADD');
session_query($s, "SELECT redis_stock_set('item', 10)");

# --- undos that fail too: the record stays, and recovery settles it
session_query($s, 'SET redislock.server = no_sadd_hdel');
($out, $err) = session_query($s, "SELECT redis_stock_decr('item', 2, 'bob')");
like($err, qr/ERROR:.*(?:can't run this command|has no permissions to run)/s, 'no_sadd_hdel: the decrement fails');
like($err, qr/WARNING:.*(?:can't run this command|has no permissions to run)/s,
	'no_sadd_hdel: and its give-back at rollback, which needs HDEL, fails too');
is(item('item'), '8 | op,2 bob | ', 'no_sadd_hdel: the units stay with their record');

$redis->command('SET', 'other', '10');
session_query($s, 'SET redislock.server = no_srem');
($out, $err) = session_query($s,
	"BEGIN; SELECT redis_stock_decr('other', 1, 'carol'); ROLLBACK");
is($out, '9', 'no_srem: a decrement');
like($err, qr/WARNING:.*(?:can't run this command|has no permissions to run)/s, 'no_srem: its give-back fails');
is(item('other'), '9 | op,1 carol | carol',
	'no_srem: and gives back nothing: units, record and buyer stay');

session_query($s, 'RESET redislock.server');
($out, $err) = session_query($s,
	'SELECT key, qty, buyer, outcome FROM redis_stock_recover() ORDER BY key');
is($out, "item|2|bob|aborted\nother|1|carol|aborted", 'redis_stock_recover finds both');
is(item('item'), '10 |  | ', 'and gives back the first');
is(item('other'), '10 |  | ', 'and the second, its buyer included');

# --- acquires
my $fence = '{' . slot_tag('lk') . '}:fence:lk';
$redis->command('SET', $fence, '9223372036854775807', 'PX', '60000');
($out, $err) = session_query($s, "SELECT redis_lock_acquire('lk')");
like($err, qr/ERROR:.*fencing token/s, 'a fencing token of 2^63-1 has no successor: ERROR');
is($redis->command('EXISTS', 'lk'), '0', 'and no lock is left');
is($redis->command('GET', $fence), '9223372036854775807', 'nor another token');

$fence = '{' . slot_tag('lk2') . '}:fence:lk2';
$redis->command('SET', $fence, '1099999999999999999', 'PX', '60000');
session_query($s, 'SET redislock.server = no_incr');
works($s, "SELECT redis_lock_acquire_session('lk2', 30000), redis_lock_fence('lk2')",
	't|1100000000000000000', 'no_incr: a lock, with the token after the last');
is($redis->command('GET', $fence), '1100000000000000000', 'no_incr: which Redis keeps');
cmp_ok($redis->command('PTTL', 'lk2'), '>', 0, 'no_incr: the lock has its lease');
works($s, "SELECT redis_lock_release('lk2')", 't', 'no_incr: and is released');

$s->quit;
$node->stop;
$redis->stop;

done_testing();
