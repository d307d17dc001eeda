# Stock stays exact.
# - Arithmetic is Redis' integer arithmetic: a stock of 2^53 asked for
#   2^53+1 units refuses (-1) and keeps its stock; what remains is exact on
#   both sides of 2^53, where doubles stop holding every integer; a stock
#   of 2^63-1 gives one unit and returns 2^63-2 exactly, and a rollback
#   gives back the largest quantities exactly; an overflow, in a decrement
#   or an incr, is an ERROR 22003 that changes nothing.
# - A decrement whose reply timed out (Redis asleep in DEBUG SLEEP, longer
#   than command_timeout) is run by Redis late; once the transaction, or the
#   savepoint, has rolled back and Redis is awake, the units and the buyer's
#   right to buy are back, given back once.
# - redis_stock_delete removes the stock with everything kept beside it and
#   says whether there was anything; it and redis_stock_recover are not for
#   PUBLIC.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use RedisLockTest qw(session_query wait_until);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('exact', $redis);

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
my ($out, $err);

# The keys Redis holds for item $key: its stock and its siblings.
sub item_keys
{
	my ($key) = @_;
	return join ' ', grep { $_ eq $key || /\A\{[0-9]+\}:[a-z]+:\Q$key\E\z/ } $redis->keys;
}

# --- integers near the limits
my ($p53, $max) = ('9007199254740992', '9223372036854775807');
($out, $err) = session_query($s,
	"SELECT redis_stock_set('big', $p53); SELECT redis_stock_decr('big', $p53 + 1)");
is("$out$err", "\n-1", 'a stock of 2^53 asked for 2^53+1 units refuses');
is($redis->command('GET', 'big'), $p53, 'and keeps its stock');
($out, $err) = session_query($s, "SELECT redis_stock_decr('big', 1)");
is("$out$err", '9007199254740991', 'one unit of 2^53 leaves 2^53-1');
($out, $err) = session_query($s,
	"SELECT redis_stock_set('big', $p53 + 2); SELECT redis_stock_decr('big', 1)");
is("$out$err", "\n9007199254740993", 'one unit of 2^53+2 leaves 2^53+1, which no double holds');

($out, $err) = session_query($s,
	"SELECT redis_stock_set('max', $max); SELECT redis_stock_decr('max', 1)");
is("$out$err", "\n9223372036854775806", 'a stock of 2^63-1 gives one unit and returns 2^63-2');
is($redis->command('GET', 'max'), '9223372036854775806', 'which is what Redis holds');
($out, $err) = session_query($s,
	"BEGIN; SELECT redis_stock_decr('max', 9223372036854775806); ROLLBACK");
is("$out$err", '0', 'a decrement of 2^63-2 units leaves 0');
is($redis->command('GET', 'max'), '9223372036854775806', 'and is given back exactly at rollback');

$redis->command('SET', 'min', '-9223372036854775808');
foreach my $call ("redis_stock_decr('min', 1)", "redis_stock_decr('min', 1, 'eve')")
{
	($out, $err) = session_query($s, "SELECT $call");
	like($err, qr/ERROR:\s+22003: /, "$call below -2^63: ERROR 22003");
}
is($redis->command('GET', 'min'), '-9223372036854775808', 'the stock is unchanged');
is(item_keys('min'), 'min', 'and nothing was recorded beside it');
($out, $err) = session_query($s, "SELECT redis_stock_incr('max', 2)");
like($err, qr/ERROR:\s+22003: /, 'an incr beyond 2^63-1: ERROR 22003');
is($redis->command('GET', 'max'), '9223372036854775806', 'the stock is unchanged');

# --- a decrement whose reply timed out
session_query($s, 'SET redislock.command_timeout = 300');
session_query($s, "SELECT redis_stock_set('hot', 10)");

# Run $sql, whose decrement meets Redis asleep, then $end; once Redis is
# awake, the stock must be 10 again and $buyer free to buy.
sub timed_out
{
	my ($sql, $end, $buyer, $what) = @_;
	my $h = $redis->debug_sleep(2);
	($out, $err) = session_query($s, $sql);
	like($err, qr/ERROR:\s+08\w\w\w: /, "$what: the decrement times out");
	session_query($s, $end);
	$redis->wake($h);
	ok(defined wait_until(5, sub { $redis->command('GET', 'hot') eq '10' }),
		"$what: once Redis is awake, the stock is whole again");
	usleep(300_000);
	is($redis->command('GET', 'hot'), '10', "$what: given back once, not twice");
	($out, $err) = session_query($s, "SELECT redis_stock_decr('hot', 1, '$buyer')");
	is("$out$err", '9', "$what: the buyer may buy");
	session_query($s, "SELECT redis_stock_set('hot', 10)");
	return;
}

timed_out("BEGIN; SELECT redis_stock_decr('hot', 1, 'alice')",
	'ROLLBACK', 'alice', 'transaction');
timed_out(
	"BEGIN; SAVEPOINT sp; SELECT redis_stock_decr('hot', 2, 'bob')",
	'ROLLBACK TO sp; COMMIT',
	'bob', 'savepoint');
ok(defined wait_until(5, sub { !defined $redis->sibling('', 'ops', 'hot') }),
	'no record of those decrements is left');
session_query($s, 'RESET redislock.command_timeout');

# --- redis_stock_delete
my $other = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
($out) = session_query($s,
	"SELECT redis_stock_set('d', 5); SELECT redis_stock_decr('d', 1, 'x')");
is($out, "\n4", 'item "d" sold to a buyer');
($out) = session_query($other, "BEGIN; SELECT redis_stock_decr('d', 1, 'y')");
is($out, '3', 'and being sold in an open transaction');
is(item_keys('d') =~ s/\{[0-9]+\}/{T}/gr, 'd {T}:buyers:d {T}:ops:d',
	'it has stock, buyers and records');
($out) = session_query($s, "SELECT redis_stock_delete('d')");
is($out, 't', 'redis_stock_delete finds something to remove');
is(item_keys('d'), '', 'and removes the stock, its buyers and its records');
($out) = session_query($s, "SELECT redis_stock_delete('d')");
is($out, 'f', 'a second time it finds nothing');
session_query($other, 'ROLLBACK');
is(item_keys('d'), '', 'the rollback of the open sale does not bring the item back');
$other->quit;

$node->safe_psql('postgres', 'CREATE ROLE plain');
session_query($s, 'SET ROLE plain');
foreach my $call ("redis_stock_delete('hot')", 'redis_stock_recover()')
{
	($out, $err) = session_query($s, "SELECT * FROM $call");
	like($err, qr/ERROR:\s+42501: permission denied for function/,
		"PUBLIC may not call $call");
}
($out, $err) = session_query($s, "SELECT redis_stock_decr('hot')");
is("$out$err", '9', 'but may decrement');
session_query($s, 'RESET ROLE');
is($redis->command('GET', 'hot'), '9', 'and the item was not deleted');

$s->quit;
$node->stop;
$redis->stop;

done_testing();
