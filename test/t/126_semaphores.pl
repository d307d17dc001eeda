# Redis semaphores (redis_semaphore_acquire, _session, redis_semaphore_release)
# on every server kind, with redis-semaphore's clients, the lease watchdog
# and a crash.
# - Interoperability (skipped when node or npm is missing): for a few
#   seconds, a redis-semaphore Semaphore (1 permit) and MultiSemaphore (2
#   permits) worker (test/node/semaphore_worker.js, npm "redis-semaphore" 5
#   over ioredis 5) and two PostgreSQL sessions (1 and 2 permits) share
#   redis-semaphore's semaphore "jobs" (limit 3) and count the permits they
#   hold in a counter on another Redis inside each critical section: it
#   never exceeds the limit on entry, and each side gets sections.
# - Single Redis, with the preload: a waiter shows in redis_locks() with the
#   permits it asks for and redis_blocking_pids() names the holder; the
#   lease watchdog renews a session's permits of a 1 s lease for 3 s; the
#   stats count acquires, waits and timeouts; permits whose lease ran out
#   unrenewed fail their transaction's commit (40001); a backend that exits
#   gives its permits back, and a backend killed (a crash restart) leaves
#   them to expire after their lease, when another session takes them.
# - Cluster: permits on the master that serves the key, given back at
#   commit; a full semaphore waited for until a foreign permit goes.
# - Redlock: permits on every master; a foreign holder filling 2 of 3
#   masters makes the acquire false with none of ours left anywhere; one
#   master killed, the permits are still granted, by the other two.
# - Sentinel: permits on the master, given back at commit.
use strict;
use warnings;

use File::Basename;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use RedisCluster;
use RedisClusterTest qw(user_key_on);
use RedisMasters;
use RedisSentinel;
use RedisLockTest qw(add_server crash_restart session session_query start_query
  finish_query works wait_until sleep_for);

my $t0 = time;
my ($out, $err);
my $run_seconds = 4;

my $redis = RedisLockTest->start_redis();
my $counter = RedisLockTest->start_redis();
my $counter_port = $counter->port;
my $node = RedisLockTest->new_node('semaphores', $redis,
	conf => "shared_preload_libraries = 'redislock'\nrestart_after_crash = on");
$node->safe_psql(
	'postgres', qq{
	CREATE SERVER counter FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$counter_port');
	-- For \$1 seconds, take \$2 permits of semaphore \$3 (limit \$4, waiting
	-- up to 2 s) transaction after transaction, and inside each critical
	-- section do what semaphore_worker.js does: count the permits held in
	-- "inside" on the counter's Redis (over the limit if it exceeds it on
	-- entry), sleep a little, uncount them.
	CREATE PROCEDURE pg_sections(seconds float8, permits int, sem text, lim int,
		INOUT sections int DEFAULT 0, INOUT over_limit int DEFAULT 0,
		INOUT failures int DEFAULT 0)
	LANGUAGE plpgsql AS \$\$
	DECLARE
		deadline timestamptz := clock_timestamp() + seconds * interval '1 s';
	BEGIN
		WHILE clock_timestamp() < deadline LOOP
			IF redis_semaphore_acquire(sem, lim, permits, 10000, 2000) THEN
				PERFORM set_config('redislock.server', 'counter', true);
				IF redis_stock_incr('inside', permits) > lim THEN
					over_limit := over_limit + 1;
				END IF;
				PERFORM pg_sleep(random() * 0.01);
				PERFORM redis_stock_decr('inside', permits);
				sections := sections + 1;
			ELSE
				failures := failures + 1;
			END IF;
			COMMIT;
		END LOOP;
	END \$\$;
});

# Our members of a semaphore, in a session whose backend pid is $pid
sub ours
{
	my ($pid) = @_;
	return qr/\Apg:.*:$pid:[0-9]+:[0-9a-f]{32}_[0-9]+\z/;
}

# Wait at most $limit seconds until backend $pid waits in the extension
sub waits
{
	my ($mon, $limit, $pid) = @_;
	return defined wait_until(
		$limit,
		sub {
			my ($o) = session_query($mon,
				"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid AND wait_event_type = 'Extension'");
			return $o eq '1';
		});
}

# --- interoperability with redis-semaphore
SKIP:
{
	foreach my $program ('node', 'npm')
	{
		skip "$program is not installed (scripts/setup installs nodejs and npm)", 6
		  if system("command -v $program >/dev/null 2>&1") != 0;
	}
	my $npm_dir = PostgreSQL::Test::Utils::tempdir('npm');
	my ($npm_out, $npm_ok) = ('');
	{
		local $ENV{npm_config_cache} = "$npm_dir/cache";
		$npm_ok = IPC::Run::run(
			[ 'npm', 'install', '--prefix', $npm_dir, '--no-audit', '--no-fund',
			  'redis-semaphore@5', 'ioredis@5' ],
			'<', \undef, '>&', \$npm_out, IPC::Run::timeout(600));
	}
	ok($npm_ok, 'redis-semaphore 5 and ioredis 5 installed with npm') or diag $npm_out;
	skip 'npm could not install redis-semaphore', 5 unless $npm_ok;
	local $ENV{NODE_PATH} = "$npm_dir/node_modules";
	my $worker = dirname(__FILE__) . '/../node/semaphore_worker.js';

	$counter->command('SET', 'inside', 0);
	my @workers = map {
		my ($permits, $name) = @$_;
		my ($wout, $werr) = ('', '');
		my $h = IPC::Run::start(
			[ 'node', $worker, '--redis', '127.0.0.1:' . $redis->port, '--name', 'jobs',
			  '--limit', 3, '--permits', $permits,
			  '--counter', "127.0.0.1:$counter_port/inside", '--seconds', $run_seconds,
			  '--worker', $name ],
			'<', \undef, '>', \$wout, '2>', \$werr);
		[ $h, \$wout, \$werr, $name ];
	} ([ 1, 'semaphore' ], [ 2, 'multisemaphore' ]);
	my @sessions = (session($node), session($node));
	start_query($sessions[$_], "CALL pg_sections($run_seconds, " . ($_ + 1) . ", 'semaphore:jobs', 3)")
	  foreach 0, 1;

	my ($node_sections, $pg_sections, $over) = (0, 0, 0);
	my @seen;
	foreach my $w (@workers)
	{
		my ($h, $wout, $werr, $name) = @$w;
		$h->finish;
		my $report = eval { decode_json($$wout) } // {};
		$node_sections += $report->{sections} // 0;
		$over += $report->{over_limit} // 1;
		push @seen, "$name " . ($report->{sections} // 'none') . ' (at most ' . ($report->{max_inside} // '?')
		  . ' inside, ' . ($report->{acquire_failures} // '?') . ' attempts timed out)';
		diag $$werr if $$werr ne '';
	}
	foreach my $i (0, 1)
	{
		($out, $err) = finish_query($sessions[$i], $run_seconds + 60);
		my ($sections, $over_limit, $failures) = split /\|/, $out;
		$pg_sections += $sections // 0;
		$over += $over_limit // 1;
		push @seen, 'pg' . ($i + 1) . ' ' . ($sections // 'none') . " ($failures attempts timed out)";
		diag $err if $err ne '';
		$sessions[$i]->quit;
	}
	diag 'critical sections in ' . $run_seconds . ' s: ' . join('; ', @seen);
	ok($node_sections > 0, "redis-semaphore's clients had critical sections ($node_sections)");
	ok($pg_sections > 0, "PostgreSQL sessions had critical sections ($pg_sections)");
	is($over, 0, 'the permits held never exceeded the limit of 3');
	is($counter->command('GET', 'inside'), '0', 'and nobody is inside any more');
	is($redis->command('EXISTS', 'semaphore:jobs'), '0', 'no permit is left behind');
}
diag sprintf 'interoperability done after %d s', time - $t0;

# --- single Redis, with the preload
my $s = session($node);
my $s2 = session($node);
my $mon = session($node);
my ($pid) = session_query($s, 'SELECT pg_backend_pid()');
my ($pid2) = session_query($s2, 'SELECT pg_backend_pid()');
session_query($mon, 'SELECT redis_stats_reset()');

works($s, "SELECT redis_semaphore_acquire_session('sem', 2, 2)", 't', 'a session takes both permits');
works($s2, "SELECT redis_semaphore_acquire_session('sem', 2, 1, 30000, 0)", 'f',
	'another is refused one (wait_ms 0)');
works($s2, "SELECT redis_semaphore_acquire_session('sem', 2, 1, 30000, 200)", 'f',
	'and when waiting 200 ms');
start_query($s2, "SELECT redis_semaphore_acquire_session('sem', 2, 1, 30000, 10000)");
ok(waits($mon, 10, $pid2), 'it waits for one permit');
works($mon, "SELECT mode, granted, permits FROM redis_locks() WHERE pid = $pid2",
	'semaphore|f|1', 'redis_locks() shows the waiter and the permit it asks for');
works($mon, "SELECT scope, mode, granted, permits FROM redis_locks() WHERE pid = $pid",
	'session|semaphore|t|2', 'and the holder with its two permits');
works($mon, "SELECT redis_blocking_pids($pid2) = ARRAY[$pid]", 't',
	'redis_blocking_pids() names the holder');
works($s, "SELECT redis_semaphore_release('sem')", '2', 'the holder gives its permits back');
($out, $err) = finish_query($s2, 30);
is("$out$err", 't', 'the waiter gets its permit');
works($s2, "SELECT redis_semaphore_release('sem')", '1', 'and gives it back');
works($mon,
	"SELECT semaphore_acquires, semaphore_waits, semaphore_timeouts FROM redis_stats() WHERE server = 'redislock'",
	'2|2|1', 'redis_stats() counts 2 acquires, 2 waits and the one that timed out');

session_query($s, 'SET redislock.lease_renewal = on');
works($s, "SELECT redis_semaphore_acquire_session('renewed', 3, 2, 1000)", 't',
	'a session takes 2 permits with a 1 s lease');
sleep_for(3);
my @members = @{ $redis->command('ZRANGE', 'renewed', 0, -1, 'WITHSCORES') };
my ($redis_now) = @{ $redis->command('TIME') };
ok(@members == 4 && ($members[0] =~ ours($pid)) && $redis_now * 1000 - $members[1] < 1000,
	"3 s later both are there, renewed within the last second (@members)");
works($mon, "SELECT renewals > 0 FROM redis_locks() WHERE pid = $pid AND key = 'renewed'", 't',
	'by the lease watchdog');
works($s, "SELECT redis_semaphore_release('renewed')", '2', 'and the release gives back both');

session_query($s, 'SET redislock.lease_renewal = off');
works($s, "BEGIN; SELECT redis_semaphore_acquire('lost', 2, 1, 500)", 't',
	'a transaction takes a permit with a 0.5 s lease, not renewed');
sleep_for(0.8);
($out, $err) = session_query($s, 'COMMIT');
like($err, qr/ERROR:\s+40001: permits of Redis semaphore "lost" on server "redislock" were lost before commit/,
	'the lease ran out: its commit fails with 40001');
is($redis->command('EXISTS', 'lost'), '0', 'and nothing is left of it');

works($s2, "SELECT redis_semaphore_acquire_session('exit', 2, 2)", 't',
	'a session holds both permits of "exit"');
$s2->quit;
ok(defined wait_until(10, sub { $redis->command('EXISTS', 'exit') eq '0' }),
	'its backend exits: it gives them back');

works($s, "SELECT redis_semaphore_acquire_session('crash', 1, 1, 1500)", 't',
	'a session holds the one permit of "crash" with a 1.5 s lease');
my $killed = [gettimeofday];
ok(crash_restart($node, $pid), 'the node restarts after the crash');
$s->quit;
eval { $mon->quit };
$mon = session($node);
my $s3 = session($node);
works($s3, "SELECT redis_semaphore_acquire_session('crash', 1, 1, 1500, 0)", 'f',
	'the backend killed, its permit is still held after the crash restart');
($out, $err) = session_query($s3, "SELECT redis_semaphore_acquire_session('crash', 1, 1, 1500, 10000)");
my $after = tv_interval($killed);
is("$out$err", 't', sprintf('and taken by another session once its lease ran out (%.2f s after the kill)', $after));
ok($after >= 1.4, 'not before');
works($s3, "SELECT redis_semaphore_release('crash')", '1', 'released');
diag sprintf 'single Redis cases done after %d s', time - $t0;

# --- Redis Cluster, 3 masters without replicas
my $cluster = RedisCluster->start_cluster(masters => 3, replicas => 0);
my @cm = $cluster->masters;
add_server($node, 'rc', qq{cluster '${\$cluster->seeds}', key_prefix 'sem:'});
my ($pid3) = session_query($s3, 'SELECT pg_backend_pid()');
session_query($s3, 'SET redislock.server = rc');
my $ck = user_key_on($cluster, $cm[1], 'sem:', 'k');
works($s3, "BEGIN; SELECT redis_semaphore_acquire('$ck', 2, 2)", 't', 'cluster: a transaction takes 2 permits');
my $held = $cluster->command($cm[1], 'ZRANGE', "sem:$ck", 0, -1);
ok(@$held == 2 && !(grep { $_ !~ ours($pid3) } @$held), "cluster: on the master that serves the key (@$held)");
works($s3, 'COMMIT', '', 'cluster: commit');
is($cluster->command($cm[1], 'EXISTS', "sem:$ck"), '0', 'cluster: the commit gave them back');
my ($redis_ms) = map { $_->[0] * 1000 } [ @{ $cluster->command($cm[1], 'TIME') } ];
$cluster->command($cm[1], 'ZADD', "sem:$ck", $redis_ms, 'foreign_0');
my $started = [gettimeofday];
start_query($s3, "SELECT redis_semaphore_acquire_session('$ck', 1, 1, 30000, 5000)");
ok(waits($mon, 10, $pid3), 'cluster: a full semaphore is waited for');
usleep(300_000);
$cluster->command($cm[1], 'ZREM', "sem:$ck", 'foreign_0');
($out, $err) = finish_query($s3, 30);
is("$out$err", 't', sprintf('cluster: granted once the foreign permit went (%.2f s)', tv_interval($started)));
works($s3, 'SELECT redis_lock_release_all()', '1', 'cluster: redis_lock_release_all() gives it back');
is($cluster->command($cm[1], 'EXISTS', "sem:$ck"), '0', 'cluster: nothing is left');
diag sprintf 'cluster case done after %d s', time - $t0;

# --- Redlock, 3 masters
my $masters = RedisMasters->start_masters(3);
my @m = map { $masters->master($_) } 0 .. 2;
add_server($node, 'rl', qq{redlock '${\$masters->endpoints}', key_prefix 'rl:'});
session_query($s3, 'SET redislock.server = rl');

# How many of our members each master holds, as "n,n,n" ("down" for a
# master that does not answer)
sub redlock_permits
{
	return join ',', map {
		my $members = eval { $_->command('ZRANGE', 'rl:sem', 0, -1) };
		defined $members ? scalar(grep { $_ =~ ours($pid3) } @$members) : 'down';
	} @m;
}

works($s3, "BEGIN; SELECT redis_semaphore_acquire('sem', 3, 2)", 't', 'redlock: a transaction takes 2 permits');
is(redlock_permits(), '2,2,2', 'redlock: on every master');
works($s3, 'COMMIT', '', 'redlock: commit');
is(redlock_permits(), '0,0,0', 'redlock: given back everywhere');

foreach my $i (0, 1)
{
	my ($ms) = map { $_->[0] * 1000 } [ @{ $m[$i]->command('TIME') } ];
	$m[$i]->command('ZADD', 'rl:sem', $ms, 'other_0', $ms, 'other_1');
}
works($s3, "SELECT redis_semaphore_acquire_session('sem', 3, 2)", 'f',
	'redlock: a foreign holder of 2 of 3 permits on 2 of 3 masters: false');
ok(defined wait_until(5, sub { redlock_permits() eq '0,0,0' }),
	'redlock: none of ours is left on any master: ' . redlock_permits());
$m[$_]->command('DEL', 'rl:sem') foreach 0, 1;

$m[2]->kill9;
works($s3, "BEGIN; SELECT redis_semaphore_acquire('sem', 3, 2)", 't',
	'redlock: one master killed, the permits are still granted');
is(redlock_permits(), '2,2,down', 'redlock: by the two others');
works($s3, 'COMMIT', '', 'redlock: commit');
is(redlock_permits(), '0,0,down', 'redlock: given back');
diag sprintf 'redlock case done after %d s', time - $t0;

# --- Sentinel: a master under one Sentinel
my $group = RedisSentinel->start_sentinel_group(replicas => 0, sentinels => 1);
my $master = $group->master_port;
add_server($node, 'ha', $group->server_options . ", key_prefix 'ha:'");
session_query($s3, 'SET redislock.server = ha');
works($s3, "BEGIN; SELECT redis_semaphore_acquire('sem', 2)", 't', 'sentinel: a transaction takes a permit');
is($group->command($master, 'ZCARD', 'ha:sem'), '1', 'sentinel: it is on the master');
works($s3, 'COMMIT', '', 'sentinel: commit');
is($group->command($master, 'EXISTS', 'ha:sem'), '0', 'sentinel: given back');

$_->quit foreach ($s3, $mon);
$node->stop;
diag sprintf 'whole test took %d s', time - $t0;

done_testing();
