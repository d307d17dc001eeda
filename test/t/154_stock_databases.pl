# The decrement records of one Redis may come from several databases of one
# cluster, and from an installation of the extension dropped since: every
# database's server "redislock" is 127.0.0.1:6379 with no prefix until
# someone says otherwise.  A recovery decides by its rows only the records
# of its own database and installation, whose rows are in its own table.
# - A decrement committed in database shop, its clear still held by an idle
#   session, is left by the recovery of database postgres ("other
#   database"): its unit stays sold and its buyer may not buy again.  Shop's
#   own recovery finds it committed.
# - After DROP EXTENSION and CREATE EXTENSION, a record of the dropped
#   installation is left ("other installation").
# - Records of 1.2, which name no database, are decided by their
#   transaction's status, the same in every database: committed in another
#   database is committed here.
# - The recovery flushes WAL before clearing a committed record: with the
#   next WAL record due on a new page, it flushes what was inserted, not a
#   position past the page's header.
# - Under the objects of 1.2, before ALTER EXTENSION UPDATE, locks work and
#   stock functions are refused with a hint to update, touching nothing.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query wait_until);

my $redis = RedisLockTest->start_redis();
my $port = $redis->port;
my $node = RedisLockTest->new_node('databases', $redis);

# Database shop: the extension and its default server, on the same Redis
# with the same (empty) prefix.
$node->safe_psql('postgres', 'CREATE DATABASE shop');
$node->safe_psql('shop', qq{
	CREATE EXTENSION redislock;
	ALTER SERVER redislock OPTIONS (SET port '$port');
});
$node->safe_psql('postgres', "SELECT redis_stock_set('sku', 10)");

# The records of item $key: "qty buyer" values, sorted.
sub records
{
	my ($key) = @_;
	my $ops = $redis->sibling('', 'ops', $key) // return '';
	my %hash = @{ $redis->command('HGETALL', $ops) };
	return join ' ', sort values %hash;
}

# The rows of redis_stock_recover() in database $db.
sub recover
{
	my ($db) = @_;
	return $node->safe_psql($db,
		"SELECT key, qty, coalesce(buyer, '-'), outcome FROM redis_stock_recover() ORDER BY buyer");
}

# A session of database $db that commits a decrement of one unit of sku by
# $buyer and stays idle, its record's clear held.
sub idle_buyer
{
	my ($db, $buyer) = @_;
	my $s = $node->background_psql($db, on_error_stop => 0, timeout => 60);
	my ($out, $err) = session_query($s, "SELECT redis_stock_decr('sku', 1, '$buyer') >= 0");
	is("$out$err", 't', "a decrement by $buyer commits in database $db");
	return $s;
}

# --- another database's committed decrement
my $shop = idle_buyer('shop', 'alice');
is(records('sku'), '1 alice', 'its record stays while the session is idle');
is(recover('postgres'), 'sku|1|alice|other database',
	'the recovery of database postgres leaves it as another database\'s');
is($redis->command('GET', 'sku'), '9', 'its unit stays sold');
is($node->safe_psql('postgres', "SELECT redis_stock_decr('sku', 1, 'alice')"),
	'-2', 'its buyer may not buy again, from any database');
is(recover('shop'), 'sku|1|alice|committed', 'shop\'s own recovery finds it committed');
is(records('sku'), '', 'and clears it');
is($redis->command('GET', 'sku'), '9', 'the unit stays sold');
$shop->quit;

# --- an installation dropped since
$shop = idle_buyer('shop', 'bob');
$node->safe_psql('shop', qq{
	DROP EXTENSION redislock CASCADE;
	CREATE EXTENSION redislock;
	ALTER SERVER redislock OPTIONS (SET port '$port');
});
is(recover('shop'), 'sku|1|bob|other installation',
	'the new installation leaves the dropped one\'s record');
is($redis->command('GET', 'sku'), '8', 'its unit stays sold');
is(records('sku'), '1 bob', 'its record stays');
my $ops = $redis->sibling('', 'ops', 'sku');
$shop->quit;
ok(defined wait_until(10, sub { records('sku') eq '' }),
	'the session that made it clears it as it ends');

# --- records of 1.2, "<system identifier>:<timeline>:<xid>:<number>"
my $sysid = $node->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
my $tli = $node->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()');
my $in_shop = $node->safe_psql('shop', 'BEGIN; SELECT pg_current_xact_id(); COMMIT');
my $aborted = $node->safe_psql('postgres', 'BEGIN; SELECT pg_current_xact_id(); ROLLBACK');
my $lost = $node->safe_psql('postgres', 'SELECT pg_current_xact_id()') + 1000;
$redis->command('HSET', $ops,
	"$sysid:$tli:$in_shop:1", '1 carol',
	"$sysid:$tli:$aborted:2", '2 dave',
	"$sysid:$tli:$lost:3", '3 erin');
$redis->command('SADD', $redis->sibling('', 'buyers', 'sku'), qw(carol dave erin));
$redis->command('DECRBY', 'sku', 6);
is( recover('postgres'),
	join("\n", 'sku|1|carol|committed', 'sku|2|dave|aborted', 'sku|3|erin|aborted'),
	'records of 1.2 are decided by their transactions, wherever those ran');
is($redis->command('GET', 'sku'), '7', 'the units of the aborted ones are back, the committed one stays sold');
is(records('sku'), '', 'no record is left');

# --- the flush before a clear, when the next WAL record starts a page
$node->safe_psql('postgres', 'VACUUM redis_stock_decrements');
my $idle = idle_buyer('postgres', 'frank');
my ($ret, $stdout, $stderr) = $node->psql('postgres', q{
	DO $$
	DECLARE
		page_offset int;
		room int;
		outcome text;
	BEGIN
		-- pad WAL with messages until the next record starts a page
		FOR attempt IN 1 .. 50 LOOP
			page_offset := (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::numeric % 8192;
			EXIT WHEN page_offset = 24;
			room := 8192 - page_offset;
			-- a message of n bytes takes 52 + n bytes up to 255 bytes of
			-- data, 55 + n past them; too little room fills the page
			PERFORM pg_logical_emit_message(false, 'p', repeat('x',
				CASE WHEN room >= 285 THEN room - 55
					 WHEN room >= 52 THEN room - 52
					 ELSE 200 END));
		END LOOP;
		SELECT r.outcome INTO outcome FROM redis_stock_recover() r;
		RAISE NOTICE 'at page offset %: %', page_offset, outcome;
	END $$;
});
is($ret, 0, 'recover runs with the WAL insert position at a page\'s start');
like($stderr, qr/at page offset 24: committed/, 'where it flushed before clearing the committed record');
unlike($stderr, qr/not satisfied/, 'asking no flush past what was inserted');
is(records('sku'), '', 'the record is cleared');
$idle->quit;

# --- the objects of 1.2 under this library, before ALTER EXTENSION UPDATE
$node->safe_psql('postgres', 'CREATE DATABASE old');
$node->safe_psql('old', qq{
	CREATE EXTENSION redislock VERSION '1.2';
	ALTER SERVER redislock OPTIONS (SET port '$port');
});
is($node->safe_psql('old', "SELECT redis_lock_acquire('old:k')"),
	't', 'locks work under the objects of 1.2');
is($node->safe_psql('old', "SELECT redis_lock_acquire('old:n'); SELECT role, connected FROM redis_server_nodes()"),
	"t\nmaster|t", 'and redis_server_nodes() gives the columns of 1.2');
($ret, $stdout, $stderr) = $node->psql('old', "SELECT redis_stock_decr('sku', 1, 'gina')");
like($stderr, qr/extension redislock needs an update to use Redis stock.*\n.*older than this library.*\n.*ALTER EXTENSION redislock UPDATE/,
	'a decrement is refused with a hint to update');
($ret, $stdout, $stderr) = $node->psql('old', 'SELECT count(*) FROM redis_stock_recover()');
like($stderr, qr/needs an update/, 'and so is a recovery');
is($redis->command('GET', 'sku'), '6', 'neither touched the stock');
$node->safe_psql('old', 'ALTER EXTENSION redislock UPDATE');
is($node->safe_psql('old', "SELECT redis_stock_decr('sku', 1, 'gina')"),
	'5', 'after the update, a decrement works');

$node->stop;
$redis->stop;

done_testing();
