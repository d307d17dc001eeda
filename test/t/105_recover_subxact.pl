# A decrement made in a PL/pgSQL exception block that rolls back belongs to
# a subtransaction with an ID of its own, so it can be given back even when
# the transaction around it commits.  Here its give-back cannot reach Redis:
# the backend talks to Redis through a proxy that is stopped when the block
# rolls back and killed after the commit, losing what it held.  The units
# stay taken until redis_stock_recover() judges the record by the
# subtransaction's ID ("aborted") and gives them back, with the buyer's
# right to buy, while the committed transaction's own decrement stays taken.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DelayProxy;
use RedisLockTest qw(session_query start_query finish_query wait_until);

my $redis = RedisLockTest->start_redis();
my $proxy = DelayProxy->start($redis->port, 0);
my $node = RedisLockTest->new_node('subxact', $redis);
my $proxy_port = $proxy->port;
$node->safe_psql(
	'postgres', qq{
	CREATE SERVER px FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$proxy_port');
	GRANT USAGE ON FOREIGN SERVER px TO PUBLIC;
	SELECT redis_stock_set('e', 10);
});

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
my $blocker = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
session_query($blocker, 'SELECT pg_advisory_lock(42)');
session_query($s, 'SET redislock.server = px; SET redislock.command_timeout = 300');

my ($out, $err) = session_query($s,
	"BEGIN; SELECT redis_stock_decr('e', 1, 'keep'), pg_current_xact_id()");
my ($left, $top) = split /\|/, $out;
is("$left$err", '9', 'a transaction takes one unit through the proxy');

# The block takes two more units, then waits for the test before it fails.
start_query(
	$s, q{DO $$
	BEGIN
		BEGIN
			PERFORM redis_stock_decr('e', 2, 'gone');
			PERFORM pg_advisory_xact_lock(42);
			RAISE EXCEPTION 'changed my mind';
		EXCEPTION WHEN raise_exception THEN
			NULL;
		END;
	END $$});
ok( defined wait_until(
		10,
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") eq '1';
		}),
	'an exception block took two units and waits');
is($redis->command('GET', 'e'), '7', 'Redis has both decrements');

# Nothing the backend sends from now on reaches Redis.
kill 'STOP', $proxy->{pid};
session_query($blocker, 'SELECT pg_advisory_unlock(42)');
($out, $err) = finish_query($s, 10);
like($err, qr/WARNING:.*not given back/, 'the block rolls back, its give-back unsent');
unlike($err, qr/ERROR/, 'and the block ends normally');
($out, $err) = session_query($s, 'COMMIT');
is($err, '', 'the transaction commits');
$proxy->stop;
$s->quit;
is($redis->command('GET', 'e'), '7', 'the rolled-back units are still taken');

($out) = $node->safe_psql('postgres',
	"SELECT xid, qty, buyer, outcome FROM redis_stock_recover() WHERE key = 'e' ORDER BY xid");
my @rows = split /\n/, $out;
my ($sub) = map { /\A([0-9]+)\|2\|gone\|aborted\z/ ? $1 : () } @rows;
ok(defined $sub, 'recover finds the block\'s decrement aborted');
cmp_ok($sub // 0, '>', $top, 'under the subtransaction\'s own ID');
is(join(',', grep { !/\|gone\|/ } @rows), "$top|1|keep|committed",
	'and the committed decrement committed');
is($redis->command('GET', 'e'), '9', 'the block\'s units are back, the committed one taken');
is($node->safe_psql('postgres', "SELECT redis_stock_decr('e', 1, 'gone')"), '8',
	'the block\'s buyer may buy again');
is($node->safe_psql('postgres', "SELECT redis_stock_decr('e', 1, 'keep')"), '-2',
	'the committed buyer may not');
is($node->safe_psql('postgres', 'SELECT count(*) FROM redis_stock_recover()'), '0',
	'a second recover finds nothing');

$blocker->quit;
$node->stop;
$redis->stop;

done_testing();
