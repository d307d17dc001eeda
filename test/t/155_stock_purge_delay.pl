# A Redis may lose writes it acknowledged: a failover to a replica that had
# not received them, a crash under appendfsync everysec.  If it loses the
# clear of a committed decrement's record after the recovery deleted the
# row, the record comes back without its row and would be judged aborted:
# the sold unit given back.  So a row outlives the first sighting of its
# record's absence by redislock.purge_delay.
# - A decrement commits; its record reaches a replica, which then stops
#   following the master (as one that lags); the clear reaches the master
#   only.  A recovery finds the record gone and keeps the row.
# - The server fails over to the replica: the record is back, and the next
#   recovery decides it committed by its row, keeping the unit sold.
# - With redislock.purge_delay = 0 the row is deleted at once.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query wait_until);

my $master = RedisLockTest->start_redis();
my $replica = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('purge', $master);

$replica->command('REPLICAOF', '127.0.0.1', $master->port);
ok(defined wait_until(10, sub { $replica->command('INFO', 'replication') =~ /master_link_status:up/ }),
	'a replica follows the master');

sub rows
{
	return $node->safe_psql('postgres', 'SELECT count(*), count(gone_since) FROM redis_stock_decrements');
}

sub recover
{
	return $node->safe_psql('postgres',
		"SELECT key, qty, buyer, outcome FROM redis_stock_recover()");
}

$node->safe_psql('postgres', "SELECT redis_stock_set('sku', 10)");
my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
my ($out, $err) = session_query($s, "SELECT redis_stock_decr('sku', 1, 'alice')");
is("$out$err", '9', 'a decrement commits, its clear held by the idle session');
my $ops = $master->sibling('', 'ops', 'sku');
ok(defined wait_until(10, sub { ($replica->command('HLEN', $ops) // 0) == 1 }),
	'its record reaches the replica');
$replica->command('REPLICAOF', 'NO', 'ONE');

($out, $err) = session_query($s, "SELECT redis_stock_get('sku')");
is("$out$err", '9', 'the session\'s next command clears the record');
is($master->command('HLEN', $ops), '0', 'on the master only');
is(recover(), '', 'a recovery finds no record');
is(rows(), '1|1', 'and keeps the row, noting that its record is gone');

$node->safe_psql('postgres', "ALTER SERVER redislock OPTIONS (SET port '" . $replica->port . "')");
is(recover(), 'sku|1|alice|committed',
	'after a failover to the replica, the record is back and decided by its row');
is($replica->command('GET', 'sku'), '9', 'its unit stays sold');
is($node->safe_psql('postgres', "SELECT redis_stock_decr('sku', 1, 'alice')"),
	'-2', 'and its buyer may not buy again');
is(rows(), '1|1', 'the row waits out redislock.purge_delay');

is( $node->safe_psql('postgres',
		"SET redislock.purge_delay = 0; SELECT count(*) FROM redis_stock_recover(); SELECT count(*) FROM redis_stock_decrements"),
	"0\n0", 'with redislock.purge_delay = 0 the row goes at once');
$s->quit;

$node->stop;
done_testing();
