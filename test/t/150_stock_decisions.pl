# A decrement that took units writes a row in its own (sub)transaction, so
# PostgreSQL's commit decides whether the unit was sold, and no WAL is
# flushed for the decrement itself.  redis_stock_recover() judges a record
# by its row once its writer has ended.
# - synchronous_commit = off: a crash after COMMIT returned but before its
#   WAL was flushed loses the order, and the unit comes back; a record is
#   cleared only once its commit is durable: at the backend's next
#   transaction end, by a command that goes with its next one to Redis.
# - A writer that commits while recover waits for Redis, or after the
#   snapshot of a REPEATABLE READ transaction that runs recover, is seen
#   committed.
# - A transaction ID that a crash lost is handed out again: while the new
#   holder runs, the old record is "in progress"; once the new holder has
#   committed decrements of its own, the old record is still "aborted".
# - A role with no privilege on the extension's objects buys; recover
#   deletes the rows whose records are gone.
# - A record left by 1.1 before ALTER EXTENSION UPDATE is decided after it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use DelayProxy;
use RedisLockTest qw(session_query start_query finish_query wait_until crash_restart);

my $redis = RedisLockTest->start_redis();
my $slow = DelayProxy->start($redis->port, 0.5);
my $stalled = DelayProxy->start($redis->port, 0);
my $stalled2 = DelayProxy->start($redis->port, 0);
my $late = DelayProxy->start($redis->port, 3);

# The operation ids of the records of item $key, sorted.
sub record_ids
{
	my ($key) = @_;
	my $ops = $redis->sibling('', 'ops', $key) // return '';
	my %hash = @{ $redis->command('HGETALL', $ops) };
	return join ' ', sort keys %hash;
}

# The rows of redis_stock_recover() on $node, one per line, buyer NULL as '-'.
sub recover
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		"SELECT key, xid, qty, coalesce(buyer, '-'), outcome FROM redis_stock_recover() ORDER BY key, xid");
}

# A server "$name" on $node that reaches Redis through $proxy.
sub proxy_server
{
	my ($node, $name, $proxy) = @_;
	my $port = $proxy->port;
	$node->safe_psql(
		'postgres', qq{
		CREATE SERVER $name FOREIGN DATA WRAPPER redislock
			OPTIONS (host '127.0.0.1', port '$port');
		GRANT USAGE ON FOREIGN SERVER $name TO PUBLIC;
	});
	return;
}

# --- synchronous_commit = off: a crash before the commit's WAL is flushed
my $async = RedisLockTest->new_node('async', $redis,
	conf => "wal_writer_delay = 10s\nautovacuum = off");
$async->safe_psql(
	'postgres', q{
	CREATE TABLE orders (buyer text PRIMARY KEY);
	SELECT redis_stock_set('x', 10);
});

my $s = $async->background_psql('postgres', on_error_stop => 0, timeout => 60);
session_query($s, 'SET synchronous_commit = off');
my ($out, $err) = session_query($s,
	"BEGIN; SELECT redis_stock_decr('x', 1, 'b1'); INSERT INTO orders VALUES ('b1'); COMMIT; SELECT pg_current_wal_insert_lsn() > pg_current_wal_flush_lsn()"
);
is("$out$err", "9\nt", 'an order commits, its WAL not flushed yet');
like(record_ids('x'), qr/\A[0-9]+:1:[0-9]+:[0-9]+:[0-9]+:[0-9]+\z/,
	'its record stays until the commit is durable');
$async->stop('immediate');
$async->start;
$s->quit;
is($async->safe_psql('postgres', 'SELECT count(*) FROM orders'),
	'0', 'the crash lost the order, and its transaction ID');
like(recover($async), qr/\Ax\|[0-9]+\|1\|b1\|aborted\z/, 'recover finds the decrement aborted');
is($redis->command('GET', 'x'), '10', 'and gives its unit back');
is(record_ids('x'), '', 'no record is left');

$s = $async->background_psql('postgres', on_error_stop => 0, timeout => 60);
session_query($s, 'SET synchronous_commit = off');
($out, $err) = session_query($s,
	"BEGIN; SELECT redis_stock_decr('x', 1, 'b2'); INSERT INTO orders VALUES ('b2'); COMMIT");
is("$out$err", '9', 'another order commits asynchronously');
isnt(record_ids('x'), '', 'its record waits');
$async->safe_psql('postgres', 'CHECKPOINT');
session_query($s, 'BEGIN; COMMIT');
($out, $err) = session_query($s, "SELECT redis_stock_get('x')");
is("$out$err", '9', 'the session reads the stock');
is(record_ids('x'), '',
	'once WAL is flushed, the next transaction end clears the record, with the next command');
$s->quit;
$async->stop('immediate');
$async->start;
is($async->safe_psql('postgres', "SELECT string_agg(buyer, ',') FROM orders"),
	'b2', 'that order survives a crash');
is(recover($async), '', 'recover finds nothing to settle');
is($redis->command('GET', 'x'), '9', 'the stock is exact');
$async->stop;

# --- writers that commit while recover runs
# Rows go as soon as a recovery finds their records gone.
my $node = RedisLockTest->new_node('decisions', $redis,
	conf => "restart_after_crash = on\nautovacuum = off\nredislock.purge_delay = 0");
proxy_server($node, $_->[0], $_->[1])
  foreach (['slow', $slow], ['stalled', $stalled], ['stalled2', $stalled2], ['late', $late]);
$node->safe_psql(
	'postgres', q{
	CREATE TABLE orders (buyer text PRIMARY KEY);
	GRANT INSERT ON orders TO PUBLIC;
	SELECT redis_stock_set(k, 100) FROM unnest(ARRAY['w', 'r', 'u', 'p']) k;
});

# A writer whose clean-up after commit does not reach Redis: its connection
# goes through a proxy that is stopped before it commits.
my $w = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
($out, $err) = session_query($w,
	"SET redislock.server = stalled; BEGIN; SELECT redis_stock_decr('w', 1, 'wb'); INSERT INTO orders VALUES ('wb')"
);
is("$out$err", '99', 'a writer takes a unit and stays open');
like(recover($node), qr/\Aw\|[0-9]+\|1\|wb\|in progress\z/, 'recover leaves it while it runs');

# Recover reaches Redis through a proxy that holds each reply back 0.5 s.
my $r = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
session_query($r, 'SET redislock.server = slow; SET redislock.command_timeout = 5000');
start_query($r, 'SELECT key, qty, buyer, outcome FROM redis_stock_recover()');
usleep(300_000);
kill 'STOP', $stalled->{pid};
($out, $err) = session_query($w, 'COMMIT');
is($err, '', 'the writer commits while recover waits for Redis');
($out, $err) = finish_query($r, 30);
is("$out$err", 'w|1|wb|committed', 'recover finds it committed');
is($redis->command('GET', 'w'), '99', 'and keeps its unit taken');
is(record_ids('w'), '', 'and clears its record');
$w->quit;
$stalled->stop;

# The snapshot of a REPEATABLE READ transaction predates the commit.
$w = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
($out, $err) = session_query($w,
	"SET redislock.server = stalled2; BEGIN; SELECT redis_stock_decr('r', 1, 'rb'); INSERT INTO orders VALUES ('rb')"
);
is("$out$err", '99', 'another writer takes a unit');
($out, $err) = session_query($r,
	"RESET redislock.server; RESET redislock.command_timeout; BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM orders WHERE buyer = 'rb'"
);
is("$out$err", '0', 'a REPEATABLE READ transaction takes its snapshot');
kill 'STOP', $stalled2->{pid};
($out, $err) = session_query($w, 'COMMIT');
is($err, '', 'the writer commits, its clean-up held back');
($out, $err) = session_query($r,
	"SELECT key, qty, buyer, outcome FROM redis_stock_recover() WHERE key = 'r'; COMMIT");
is("$out$err", 'r|1|rb|committed', 'recover in that transaction finds it committed');
is($redis->command('GET', 'r'), '99', 'and keeps its unit taken');
$w->quit;
$stalled2->stop;

# --- a transaction ID lost in a crash and handed out again
$w = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
session_query($w, 'SET redislock.server = late');
my $pid = $w->query_safe('SELECT pg_backend_pid()');
start_query($w, "BEGIN; SELECT redis_stock_decr('u', 2, 'lost')");
ok(defined wait_until(10, sub { record_ids('u') ne '' }),
	'a decrement-only transaction reaches Redis, its reply held back');
my $lost = (split /:/, record_ids('u'))[-2];
ok(crash_restart($node, $pid), 'a crash ends it before any WAL of it');
# psql has left with its connection; quit only reaps it
eval { $w->quit };
is($redis->command('GET', 'u'), '98', 'its units are taken');

my $t = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
($out, $err) = session_query($t, 'BEGIN; SELECT pg_current_xact_id()');
is($out, $lost, 'the next transaction gets its ID again');
like(recover($node), qr/\Au\|$lost\|2\|lost\|in progress\z/,
	'while it runs, the record is in progress');
($out, $err) = session_query($t,
	"SELECT redis_stock_decr('u', 1, 'again'); INSERT INTO orders VALUES ('again'); COMMIT");
is("$out$err", '97', 'it takes a unit of its own and commits');
($out, $err) = session_query($t, "SELECT redis_stock_get('u')");
is("$out$err", '97', 'and its next command clears the record of its own');
like(recover($node), qr/\Au\|$lost\|2\|lost\|aborted\z/,
	'then the lost transaction\'s record is aborted');
is($redis->command('GET', 'u'), '99', 'only its units are given back');
is($node->safe_psql('postgres', "SELECT redis_stock_decr('u', 1, 'again')"),
	'-2', 'the committed buyer may not buy again');
is($node->safe_psql('postgres', "SELECT redis_stock_decr('u', 1, 'lost')"),
	'98', 'the lost one may');
$t->quit;

# --- a role with no privilege on the extension's objects buys
$node->safe_psql('postgres', 'CREATE ROLE shopper LOGIN');
$node->psql(
	'postgres',
	"BEGIN; SELECT redis_stock_decr('p', 1, 'shopper'); INSERT INTO orders VALUES ('shopper'); COMMIT",
	stdout => \$out,
	stderr => \$err,
	extra_params => [ '-U', 'shopper' ]);
is("$out$err", '99', 'a role without grants buys');
$node->psql(
	'postgres', 'SELECT count(*) FROM redis_stock_decrements',
	stdout => \$out,
	stderr => \$err,
	extra_params => [ '-U', 'shopper' ]);
like($err, qr/permission denied for table redis_stock_decrements/,
	'and cannot read the rows of decrements');
isnt($node->safe_psql('postgres', 'SELECT count(*) FROM redis_stock_decrements'),
	'0', 'which hold its decrement');
ok(defined wait_until(10, sub { record_ids('u') eq '' && record_ids('p') eq '' }),
	'the records of the ended sessions\' orders are cleared');
is(recover($node), '', 'recover finds no record to settle');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM redis_stock_decrements d JOIN pg_foreign_server s ON s.oid = d.server WHERE srvname = 'redislock'"
	),
	'0',
	'and deletes the rows of its server whose records are gone');
$node->stop;

# --- a record of 1.1 left in Redis before the update
my $old = PostgreSQL::Test::Cluster->new('old');
$old->init;
$old->start;
my $port = $redis->port;
$old->safe_psql(
	'postgres', qq{
	CREATE EXTENSION redislock VERSION '1.1';
	ALTER SERVER redislock OPTIONS (SET port '$port');
	SELECT redis_stock_set('v', 10);
});
my $sysid = $old->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
my $aborted = $old->safe_psql('postgres', 'BEGIN; SELECT pg_current_xact_id(); ROLLBACK');
my $committed = $old->safe_psql('postgres', 'BEGIN; SELECT pg_current_xact_id(); COMMIT');

# The records key of item v, as 1.1 names it: its slot's tag, then the key.
my $tag = 0;
$tag++ until RedisLockTest::key_slot($tag) == RedisLockTest::key_slot('v');
my $ops = "{$tag}:ops:v";
my $buyers = "{$tag}:buyers:v";
$redis->command('HSET', $ops, "$sysid:$aborted:1", '2 gone', "$sysid:$committed:1", '3 kept');
$redis->command('SADD', $buyers, qw(gone kept));
$redis->command('DECRBY', 'v', 5);
$old->safe_psql('postgres', 'ALTER EXTENSION redislock UPDATE');
is( recover($old),
	join("\n", "v|$aborted|2|gone|aborted", "v|$committed|3|kept|committed"),
	'after the update, recover decides the records of 1.1 by their transactions');
is($redis->command('GET', 'v'), '7', 'the aborted one\'s units are back, the committed taken');
is(record_ids('v'), '', 'no record is left');
$old->stop;

$redis->stop;

done_testing();
