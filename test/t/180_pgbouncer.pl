# Clients behind PgBouncer in transaction pooling mode, with and without the
# preload.  Transaction-scoped locks and stock decrements work through it:
# pgbench's clients, four times as many as the server connections, take a
# lock, update a counter the way only mutual exclusion keeps exact, and
# sell a unit, committing or rolling back; the stock is then exactly what
# the committed transactions left, and no lock key remains.  A waiter
# behind a pooled holder is woken as soon as the holder commits, and a
# rollback gives its units back.  A session lock belongs to the server
# connection: with a pool of one, the lock that one client took outlives
# that client, and the next client sees it as its own, is granted the key
# at once and releases it, as with a session-level advisory lock.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use IPC::Run;
use PgBouncer;
use RedisLockTest qw(session_query start_query finish_query wait_until works);

plan skip_all => 'pgbouncer is not installed (scripts/setup installs it)'
  unless defined PgBouncer->program;

# pgbench's clients and the transactions each runs
my $clients = 16;
my $per_client = 25;
my $initial_stock = 1000;

# One transaction of pgbench: the lock guards a read-then-write of a counter
# (two transactions inside at once would both read n and one increment would
# be lost), then a unit is sold and the order written; a quarter roll back.
my $script = <<'EOS';
\set outcome random(1, 4)
BEGIN;
SELECT pb_check(redis_lock_acquire('pb:k', 30000, 20000), 'pb:k not granted');
SELECT n FROM pb_counter \gset
SELECT pg_sleep(0.002);
UPDATE pb_counter SET n = :n + 1;
SELECT pb_check(redis_stock_decr('pb:sku', 1) >= 0, 'pb:sku sold out');
INSERT INTO pb_orders DEFAULT VALUES;
\if :outcome = 1
ROLLBACK;
\else
COMMIT;
\endif
EOS

# Many pooled clients take the lock and sell stock in their transactions.
sub pgbench_through_pool
{
	my ($node, $redis, $pool, $label) = @_;

	$node->safe_psql(
		'postgres', qq{
		CREATE TABLE pb_counter (n int NOT NULL);
		INSERT INTO pb_counter VALUES (0);
		CREATE TABLE pb_orders (id bigserial PRIMARY KEY, backend int DEFAULT pg_backend_pid());
		CREATE FUNCTION pb_check(ok boolean, what text) RETURNS void LANGUAGE plpgsql
		  AS \$\$BEGIN IF ok IS NOT TRUE THEN RAISE EXCEPTION '%', what; END IF; END\$\$;
		SELECT redis_stock_set('pb:sku', $initial_stock);
	});
	my $file = PostgreSQL::Test::Utils::tempdir() . '/order.sql';
	PostgreSQL::Test::Utils::append_to_file($file, $script);

	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(
		[
			'pgbench', '-n', '-c', $clients, '-j', 2, '-t', $per_client, '-f', $file,
			$pool->connstr('postgres')
		],
		'<', \undef, '>', \$out, '2>', \$err);
	my $total = $clients * $per_client;
	ok($ok, "$label: pgbench through PgBouncer succeeds") or diag("$out\n$err");
	unlike($err, qr/aborted|error/i, "$label: no pgbench client failed");
	like($out, qr/number of transactions actually processed: $total\/$total\b/,
		"$label: all $total transactions ran");

	my ($committed, $counter, $backends) = split /\|/,
	  $node->safe_psql('postgres',
		'SELECT (SELECT count(*) FROM pb_orders), (SELECT n FROM pb_counter),
		        (SELECT count(DISTINCT backend) FROM pb_orders)');
	note "$label: $committed of $total committed, on $backends server connections";
	cmp_ok($backends, '<=', 4, "$label: the $clients clients shared at most 4 server connections");
	ok($committed > 0 && $committed < $total, "$label: some transactions committed, some rolled back");
	is($counter, $committed, "$label: no two transactions were inside the lock at once");
	is($redis->command('GET', 'pb:sku'), $initial_stock - $committed,
		"$label: the stock is the initial stock less the committed orders");
	is($redis->command('EXISTS', 'pb:k'), 0, "$label: no lock key is left in Redis");
	is($redis->sibling('', 'waiters', 'pb:k'), undef, "$label: nor a queue of waiters");
	return;
}

# A pooled waiter is woken by a pooled holder's commit.
sub wake_through_pool
{
	my ($node, $pool, $label) = @_;
	my $holder = $pool->session($node);
	my $waiter = $pool->session($node);

	works($holder, "BEGIN; SELECT redis_lock_acquire('pb:w', 30000, 0)", 't',
		"$label: a pooled client takes a lock in its transaction");
	start_query($waiter, "SELECT redis_lock_acquire('pb:w', 30000, 20000)");
	ok( defined wait_until(
			20,
			sub {
				$node->safe_psql('postgres',
					"SELECT count(*) FROM pg_stat_activity
					  WHERE wait_event_type = 'Extension' AND query LIKE '%''pb:w'', 30000, 20000%'")
				  eq '1';
			}),
		"$label: another pooled client waits for it");
	usleep(300_000);
	my $t0 = [gettimeofday];
	works($holder, 'COMMIT', '', "$label: the holder commits");
	my ($out, $err) = finish_query($waiter, 20);
	my $secs = tv_interval($t0);
	is("$out$err", 't', "$label: the waiter is granted the lock");
	note sprintf '%s: granted %.3f s after the commit', $label, $secs;
	cmp_ok($secs, '<', 1, "$label: within a second of the holder's commit");
	$_->quit foreach ($holder, $waiter);
	return;
}

# A pooled rollback gives the units back.
sub rollback_through_pool
{
	my ($node, $redis, $pool, $label) = @_;
	my $client = $pool->session($node);
	my $before = $redis->command('GET', 'pb:sku');

	works($client, "BEGIN; SELECT redis_stock_decr('pb:sku', 3)", $before - 3,
		"$label: a pooled client takes 3 units in its transaction");
	is($redis->command('GET', 'pb:sku'), $before - 3, "$label: Redis shows them taken");
	works($client, 'ROLLBACK', '', "$label: the client rolls back");
	is($redis->command('GET', 'pb:sku'), $before, "$label: the rollback gave the units back");
	$client->quit;
	return;
}

# With one server connection, the next client inherits a session lock.
sub session_lock_through_single_pool
{
	my ($node, $redis, $single, $label) = @_;
	my $first = $single->session($node);
	my $next = $single->session($node);

	my ($pid) = session_query($first, 'SELECT pg_backend_pid()');
	works($first, "SELECT redis_lock_acquire_session('pb:s')", 't',
		"$label: a client takes a session lock through a pool of one");
	like($redis->command('GET', 'pb:s'), qr/:$pid:\d+:[0-9a-f]{32}\z/,
		"$label: its owner in Redis is the server connection's backend");
	works($next, 'SELECT pg_backend_pid()', $pid,
		"$label: the next client is given the same server connection");
	works(
		$next,
		'SELECT key, scope, holds FROM redis_locks() WHERE pid = pg_backend_pid()',
		'pb:s|session|1',
		"$label: and sees the session lock as its own");

	$first->quit;
	is($redis->command('EXISTS', 'pb:s'), 1,
		"$label: the lock outlives the client that took it");
	is($node->safe_psql('postgres', "SELECT redis_lock_acquire('pb:s')"),
		'f', "$label: a client on the node itself cannot take it");
	works($next, "BEGIN; SELECT redis_lock_acquire('pb:s')", 't',
		"$label: the next client is granted it at once in a transaction");
	works(
		$next,
		'SELECT scope, holds FROM redis_locks() WHERE pid = pg_backend_pid() ORDER BY scope',
		"session|1\ntransaction|1",
		"$label: as a hold stacked on the server connection's session lock");
	works($next, 'COMMIT', '', "$label: its transaction ends");
	works($next, "SELECT redis_lock_release('pb:s')", 't',
		"$label: the next client releases the session lock");
	is($redis->command('EXISTS', 'pb:s'), 0, "$label: and the key is gone");
	$next->quit;
	return;
}

foreach my $preload (0, 1)
{
	my $label = $preload ? 'preloaded' : 'loaded on use';
	my $redis = RedisLockTest->start_redis();
	my $node = RedisLockTest->new_node($preload ? 'preloaded' : 'plain',
		$redis, conf => $preload ? "shared_preload_libraries = 'redislock'" : '');
	my $pool = PgBouncer->start($node, pool_size => 4);
	my $single = PgBouncer->start($node, pool_size => 1);

	pgbench_through_pool($node, $redis, $pool, $label);
	wake_through_pool($node, $pool, $label);
	rollback_through_pool($node, $redis, $pool, $label);
	session_lock_through_single_pool($node, $redis, $single, $label);

	$_->stop foreach ($pool, $single);
	$node->stop;
	$redis->stop;
}

done_testing();
