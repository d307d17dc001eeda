# With redislock preloaded, the decrements that a crash left open are
# settled with nobody calling anything: after a backend's SIGKILL (the
# postmaster restarts every process) and after an immediate shutdown, the
# launcher starts a worker in every database that has the extension, which
# gives back the units of transactions that did not commit, on every server
# of that database, within 15 s, and logs what it gave back.  Committed
# orders keep their units.  A database without the extension is left
# alone, with a debug line; so is a Redlock server, which holds no stock.
# The worker, a superuser, uses no operator that a user made in public.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RedisLockTest qw(session_query wait_until);

my $redis = RedisLockTest->start_redis();
my $port  = $redis->port;
my $node  = RedisLockTest->new_node('recover', $redis, conf => join("\n",
		"shared_preload_libraries = 'redislock'",
		'restart_after_crash = on',
		'log_min_messages = debug1'));

# A second database with the extension, whose stock is under another
# prefix, on two servers: one on the same Redis, one Redlock, and a third
# database without the extension.
$node->safe_psql('postgres', 'CREATE DATABASE shop');
$node->safe_psql('postgres', 'CREATE DATABASE plain');
$node->safe_psql('shop', qq{
	CREATE EXTENSION redislock;
	ALTER SERVER redislock OPTIONS (SET port '$port', ADD key_prefix 'shop:');
	CREATE SERVER other FOREIGN DATA WRAPPER redislock
	  OPTIONS (port '$port', key_prefix 'other:');
	CREATE SERVER quorum FOREIGN DATA WRAPPER redislock
	  OPTIONS (redlock '127.0.0.1:$port,127.0.0.1:$port,127.0.0.1:$port');
	CREATE FUNCTION public.hijack(text, numeric) RETURNS text LANGUAGE plpgsql
	  AS \$\$BEGIN RAISE WARNING 'hijacked by %', current_user; RETURN \$1 || \$2::text; END\$\$;
	CREATE OPERATOR public.|| (LEFTARG = text, RIGHTARG = numeric, FUNCTION = public.hijack);
});
$node->safe_psql('postgres',
	"SELECT redis_stock_set(k, 100) FROM unnest(ARRAY['a', 'b']) k");
$node->safe_psql('shop', q{
	SELECT redis_stock_set('a', 50);
	SET redislock.server = other;
	SELECT redis_stock_set('o', 10);
});

# The stock of each item, as Redis has it.
sub stocks
{
	return join ' ', map { $redis->command('GET', $_) // '-' } qw(a b shop:a other:o);
}

# Open a session on $db and start a transaction in it that runs $sql;
# returns the session and the output.
sub open_transaction
{
	my ($db, $sql) = @_;
	my $s = $node->background_psql($db, on_error_stop => 0, timeout => 60);
	my ($out, $err) = session_query($s, "BEGIN; $sql");
	is($err, '', "an open transaction runs in $db: $sql");
	return ($s, $out);
}

# Wait for the stock to be $expected and return the seconds it took.
sub stock_becomes
{
	my ($expected, $limit) = @_;
	return wait_until($limit, sub { stocks() eq $expected });
}

my $log_offset = -s $node->logfile;
$node->restart;
ok(defined wait_until(10, sub {
			slurp_file($node->logfile, $log_offset) =~
			  /extension redislock is not installed in database "plain"/
		}),
	'at the start, the worker of a database without the extension says so at DEBUG1');

# --- SIGKILL of a backend with an open decrement
is($node->safe_psql('postgres', "SELECT redis_stock_decr('a', 1, 'c1')"), '99',
	'a committed order');
my ($s, $out) = open_transaction('postgres',
	"SELECT redis_stock_decr('a', 2, 'u1'), pg_backend_pid()");
my ($left, $pid) = split /\|/, $out;
is($left, '97', 'and an uncommitted one');

$log_offset = -s $node->logfile;
kill 'KILL', $pid;
my $t0 = time;
my $secs = stock_becomes('99 100 50 10', 15);
ok(defined $secs,
	sprintf 'after the SIGKILL, the units come back within 15 s (%.1f s)', time - $t0);
$s->quit;
like(slurp_file($node->logfile, $log_offset),
	qr/LOG:  gave back 2 units of Redis stock on server "redislock" in database "postgres"\n.*DETAIL:  1 decrement did not commit.  Units by item: a \(2\)\./,
	'the worker logs what it gave back');
is($node->safe_psql('postgres', "SELECT redis_stock_decr('a', 1, 'u1')"), '98',
	'the buyer of the killed order may buy again');
is($node->safe_psql('postgres', "SELECT redis_stock_decr('a', 1, 'c1')"), '-2',
	'the committed buyer may not');

# --- immediate shutdown with several open decrements, in two databases and
# on two servers of one of them
my @sessions;
foreach my $open (
	[ 'postgres', "SELECT redis_stock_decr('a', 3, 'x1'); SELECT redis_stock_decr('b', 4)" ],
	[ 'postgres', "SAVEPOINT sp; SELECT redis_stock_decr('b', 5, 'x2')" ],
	[ 'shop',     "SELECT redis_stock_decr('a', 6)" ],
	[ 'shop',     "SET LOCAL redislock.server = other; SELECT redis_stock_decr('o', 7)" ])
{
	my ($session) = open_transaction(@$open);
	push @sessions, $session;
}
is($node->safe_psql('shop', "SELECT redis_stock_decr('a', 1)"), '43',
	'and a committed one in shop');
is(stocks(), '95 91 43 3', 'the stock with the open decrements taken');

$log_offset = -s $node->logfile;
$node->stop('immediate');
$t0 = time;
$node->start;
$_->quit foreach @sessions;
$secs = stock_becomes('98 100 49 10', 15);
ok(defined $secs,
	sprintf 'after an immediate shutdown, every open decrement is given back within 15 s of the start (%.1f s)',
	time - $t0);

my $log = slurp_file($node->logfile, $log_offset);
like($log, qr/gave back 12 units of Redis stock on server "redislock" in database "postgres"/,
	'the worker of postgres logs its give-backs');
like($log, qr/gave back 6 units of Redis stock on server "redislock" in database "shop"/,
	'the worker of shop logs those of its first server');
like($log, qr/gave back 7 units of Redis stock on server "other" in database "shop"/,
	'and those of its second');
like($log, qr/redislock server "quorum" in database "shop" holds no stock/,
	'a Redlock server is passed over with a debug line');
# (PostgreSQL 13 logs the warning that an immediate shutdown sends each
# session; later versions send it to the client only.)
is( join("\n",
		grep { /\b(ERROR|WARNING|FATAL|PANIC):/ && !/terminating connection because of crash of another server process/ }
		  split /\n/, $log),
	'',
	'no error was logged: none for the database without the extension, none of a recovery, no operator hijacked');

is($node->safe_psql('postgres', 'SELECT count(*) FROM redis_stock_recover()'), '0',
	'redis_stock_recover() finds nothing left');

$node->stop;
$redis->stop;

done_testing();
