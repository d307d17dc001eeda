# Redlock interoperability with node-redlock (npm "redlock" 4, over ioredis
# 5, installed with npm into a temporary directory), on one set of 3
# independent masters:
# - node-redlock holds the resource: redislock's acquire (wait_ms 0, and
#   waiting a little) is not granted and leaves node-redlock's value on
#   every master;
# - redislock holds it: a node-redlock attempt is not granted and leaves our
#   token on every master, from which redislock's release then clears it;
# - a mixed run, for a bounded time: 2 node-redlock workers
#   (test/node/redlock_worker.js) and 2 PostgreSQL sessions take the lock
#   in turn, and inside it read, briefly sleep over and write back a counter
#   on another Redis, counting holders on entry.  No two holders ever
#   overlap and no update is lost: the counter equals the number of
#   critical sections of both sides, each of which got some.
# Skipped when node or npm is not installed (scripts/setup installs them).
use strict;
use warnings;

use File::Basename;
use File::Spec;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Symbol;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use RedisMasters;
use RedlockTest qw(new_redlock_node session works values_on);
use RedisLockTest qw(session_query start_query finish_query wait_until);

foreach my $program ('node', 'npm')
{
	plan skip_all => "$program is not installed (scripts/setup installs nodejs and npm)"
	  unless grep { -x "$_/$program" } File::Spec->path;
}

# Seconds of the mixed run, for each of its four clients, and milliseconds
# each critical section sleeps between reading the counter and writing it
# back: long enough that a holder who should have been excluded overlaps
# with another one often enough to be seen.
my $run_seconds = 8;
my $hold_ms = 10;

my $t0 = time;
my $npm_dir = PostgreSQL::Test::Utils::tempdir('npm');
my ($npm_out, $npm_ok) = ('');
{
	local $ENV{npm_config_cache} = "$npm_dir/cache";
	$npm_ok = IPC::Run::run(
		[ 'npm', 'install', '--prefix', $npm_dir, '--no-audit', '--no-fund',
			'--loglevel=error', 'redlock@4', 'ioredis@5' ],
		'<', \undef, '>&', \$npm_out, IPC::Run::timeout(600));
}
unless (ok($npm_ok, sprintf('node-redlock 4 and ioredis 5 installed with npm (%d s)', time - $t0)))
{
	diag $npm_out;
	done_testing();
	exit;
}
$ENV{NODE_PATH} = "$npm_dir/node_modules";
my $worker = dirname(__FILE__) . '/../node/redlock_worker.js';

my $masters = RedisMasters->start_masters(3);
my $counter = RedisLockTest->start_redis();
my $counter_port = $counter->port;
my $node = new_redlock_node(
	'interop', $masters,
	key_prefix => 'locks:',
	sql        => qq{
	CREATE SERVER counter FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$counter_port');
	-- For \$1 seconds, take Redlock lock \$2 (wait_ms 100) transaction
	-- after transaction, and inside each critical section do what
	-- redlock_worker.js does: count this holder in "shared:inside" (an
	-- overlap if it is not the only one), read "shared", sleep \$3 ms,
	-- write it back plus one, uncount the holder.
	CREATE PROCEDURE pg_sections(seconds float8, resource text, hold_ms int,
		INOUT sections int DEFAULT 0, INOUT overlapped int DEFAULT 0,
		INOUT lock_failures int DEFAULT 0)
	LANGUAGE plpgsql AS \$\$
	DECLARE
		deadline timestamptz := clock_timestamp() + seconds * interval '1 s';
		value bigint;
	BEGIN
		WHILE clock_timestamp() < deadline LOOP
			IF redis_lock_acquire(resource, 1000, 100) THEN
				PERFORM set_config('redislock.server', 'counter', true);
				IF redis_stock_incr('shared:inside') <> 1 THEN
					overlapped := overlapped + 1;
				END IF;
				value := coalesce(redis_stock_get('shared'), 0);
				PERFORM pg_sleep(hold_ms / 1000.0);
				PERFORM redis_stock_set('shared', value + 1);
				PERFORM redis_stock_decr('shared:inside');
				sections := sections + 1;
			ELSE
				lock_failures := lock_failures + 1;
			END IF;
			COMMIT;
		END LOOP;
	END \$\$;
});

# Start redlock_worker.js with @args over the masters, its standard input
# a pipe, and return its harness, the pipe, and references to its output
# and errors.
sub start_worker
{
	my (@args) = @_;
	my ($out, $err) = ('', '');
	my $in = gensym;
	my $h = IPC::Run::start([ 'node', $worker, '--masters', $masters->endpoints, @args ],
		'<pipe', $in, '>', \$out, '2>', \$err);
	return ($h, $in, \$out, \$err);
}

# Wait at most $limit seconds for worker $h to print line number $n
# (from 1) and return it decoded, or undef (also if it is not JSON).
sub worker_line
{
	my ($h, $out, $n, $limit) = @_;
	my $t0 = [gettimeofday];
	until ((() = $$out =~ /\n/g) >= $n)
	{
		return undef if tv_interval($t0) > $limit || !$h->pumpable;
		$h->pump_nb;
		usleep(10_000);
	}
	return eval { decode_json((split /\n/, $$out)[ $n - 1 ]) };
}

my $s = session($node);
my ($out, $err, $secs);

# --- node-redlock holds the resource
my ($h, $in, $hout, $herr) = start_worker('--resource', 'locks:counter', '--once', 'hold',
	'--ttl', 30000, '--worker', 'holder');
my $line = worker_line($h, $hout, 1, 30);
ok($line && $line->{locked}, 'node-redlock takes the resource') or diag $$herr;
my $value = $line ? $line->{value} // 'none' : 'none';
is(join(' ', values_on($masters, 'locks:counter')), join(' ', ($value) x 3),
	'every master holds node-redlock\'s value');
works($s, "SELECT redis_lock_acquire_session('counter', 30000)", 'f',
	'redislock does not get it (wait_ms 0)');
($out, $err, $secs) = session_query($s, "SELECT redis_lock_acquire_session('counter', 30000, 300)");
is("$out$err", 'f', sprintf('nor waiting 300 ms (%.2f s)', $secs));
is(join(' ', values_on($masters, 'locks:counter')), join(' ', ($value) x 3),
	'and node-redlock\'s value is still on every master');
close $in;
$line = worker_line($h, $hout, 2, 30);
ok($line && $line->{unlocked}, 'node-redlock releases it');
$h->finish;
ok(defined wait_until(5, sub { join(' ', values_on($masters, 'locks:counter')) eq 'nil nil nil' }),
	'the key is gone from every master');

# --- redislock holds the resource
works($s, "SELECT redis_lock_acquire_session('counter', 30000)", 't', 'redislock takes the resource');
my @tokens = values_on($masters, 'locks:counter');
($h, $in, $hout, $herr) = start_worker('--resource', 'locks:counter', '--once', 'try',
	'--worker', 'trier');
$line = worker_line($h, $hout, 1, 30);
ok($line && !$line->{locked}, 'a node-redlock worker does not get it') or diag $$herr;
$h->finish;
is(join(' ', values_on($masters, 'locks:counter')), join(' ', ($tokens[0]) x 3),
	'our token is still on every master');
works($s, "SELECT redis_lock_release('counter')", 't', 'redislock releases it');
ok(defined wait_until(5, sub { join(' ', values_on($masters, 'locks:counter')) eq 'nil nil nil' }),
	'the key is gone from every master: ' . join(' ', values_on($masters, 'locks:counter')));
# A key left behind would make the mixed run one of fewer masters.
$_->command('DEL', 'locks:counter') foreach map { $masters->master($_) } 0 .. 2;

# --- a mixed run
$counter->command('SET', 'shared', 0);
my @workers = map {
	[ start_worker('--resource', 'locks:counter', '--counter', "127.0.0.1:$counter_port/shared",
		'--seconds', $run_seconds, '--hold-ms', $hold_ms, '--worker', "node$_") ]
} 1 .. 2;
my @sessions = ($s, session($node));
start_query($_, "CALL pg_sections($run_seconds, 'counter', $hold_ms)") foreach @sessions;

my (%node_sections, %pg_sections);
my ($overlaps, $lock_failures, $late, $unlock_failures) = (0, 0, 0, 0);
foreach my $i (0 .. 1)
{
	my ($h, undef, $wout, $werr) = @{ $workers[$i] };
	my $report = worker_line($h, $wout, 1, $run_seconds + 60);
	my $name = 'node' . ($i + 1);
	ok($report, "node-redlock worker $name reports") or diag $$werr;
	$h->finish;
	$report //= {};
	$node_sections{$name} = $report->{sections} // 0;
	$overlaps += $report->{overlaps} // 0;
	$lock_failures += $report->{lock_failures} // 0;
	$late += $report->{late} // 0;
	$unlock_failures += $report->{unlock_failures} // 0;
}
foreach my $i (0 .. 1)
{
	($out, $err) = finish_query($sessions[$i], $run_seconds + 60);
	my $name = 'pg' . ($i + 1);
	my ($sections, $over, $failures) = split /\|/, $out;
	ok($err eq '' && defined $failures, "PostgreSQL session $name ends its run") or diag $err;
	$pg_sections{$name} = $sections // 0;
	$overlaps += $over // 0;
	$lock_failures += $failures // 0;
}

my $node_total = 0;
$node_total += $_ foreach values %node_sections;
my $pg_total = 0;
$pg_total += $_ foreach values %pg_sections;
my $total = $node_total + $pg_total;
diag sprintf 'critical sections in %d s: node-redlock %s; PostgreSQL %s; total %d;'
  . ' lock attempts not granted %d; node-redlock sections past their validity %d,'
  . ' failed unlocks %d',
  $run_seconds, join(', ', map { "$_ $node_sections{$_}" } sort keys %node_sections),
  join(', ', map { "$_ $pg_sections{$_}" } sort keys %pg_sections), $total, $lock_failures,
  $late, $unlock_failures;
ok($node_total > 0, "node-redlock workers had critical sections ($node_total)");
ok($pg_total > 0, "PostgreSQL sessions had critical sections ($pg_total)");
is($overlaps, 0, 'no two holders overlapped');
is($counter->command('GET', 'shared'), $total,
	"the counter is the number of critical sections ($total): no update was lost");
is($counter->command('GET', 'shared:inside'), '0', 'and nobody is inside any more');
diag sprintf 'whole test took %d s', time - $t0;

$_->quit foreach @sessions;
$node->stop;

done_testing();
