# Redis locks in shared mode (redis_lock_acquire_shared, _session,
# redis_lock_release_shared) beside exclusive ones, on every server kind.
# - Single Redis, with the preload: two sessions read at once; a writer
#   waits for both, redis_blocking_pids() names both readers, and it is
#   granted when the last one ends; readers waiting for a writer are all
#   granted at its commit; a plain SET NX client is refused while anyone
#   reads, and a reader while it holds the key; a stream of readers from
#   three sessions does not starve a writer; the lease watchdog renews a
#   reader of a 1 s lease for 3 s; a reader whose lease ran out unrenewed
#   fails its commit (40001); the stats count shared acquires, waits and
#   timeouts; a reader whose backend exits is gone at once, one whose
#   backend is killed is gone when its lease ends.
# - Cluster: readers on the master that serves the key, and a writer
#   waiting for them.
# - Redlock: a reader on every master; a foreign writer on 2 of 3 masters
#   refuses it and leaves none of ours; one master killed, readers are
#   still granted, by the other two.
# - Sentinel: a reader on the master, gone at commit.
use strict;
use warnings;

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

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('shared_mode', $redis,
	conf => "shared_preload_libraries = 'redislock'\nrestart_after_crash = on");
$node->safe_psql('postgres', 'CREATE TABLE sections (who text, got timestamptz, done timestamptz)');

# The owner token of backend $pid
sub ours
{
	my ($pid) = @_;
	return qr/\Apg:.*:$pid:[0-9]+:[0-9a-f]{32}\z/;
}

# Wait at most $limit seconds until each of backends @pids waits in the
# extension
sub waits
{
	my ($mon, $limit, @pids) = @_;
	my $list = join ',', @pids;
	return defined wait_until(
		$limit,
		sub {
			my ($o) = session_query($mon,
				"SELECT count(*) FROM pg_stat_activity WHERE pid IN ($list) AND wait_event_type = 'Extension'");
			return $o eq scalar(@pids);
		});
}

my @s = map { session($node) } 1 .. 3;
my @pid = map { (session_query($_, 'SELECT pg_backend_pid()'))[0] } @s;
my $mon = session($node);
session_query($mon, 'SELECT redis_stats_reset()');

# --- readers and writers
works($s[0], "BEGIN; SELECT redis_lock_acquire_shared('rw')", 't', 'a session reads');
works($s[1], "BEGIN; SELECT redis_lock_acquire_shared('rw', 30000, 0)", 't', 'and another at once');
is($redis->command('ZCARD', 'rw'), '2', 'two readers at the key');
is($redis->command('SET', 'rw', 'other', 'NX', 'PX', 1000), undef, 'a plain SET NX client is refused');
my $started = [gettimeofday];
start_query($s[2], "SELECT redis_lock_acquire_session('rw', 30000, 10000)");
ok(waits($mon, 10, $pid[2]), 'a writer waits');
works($mon, "SELECT array(SELECT unnest(redis_blocking_pids($pid[2])) ORDER BY 1) = ARRAY[$pid[0], $pid[1]]::int[]
	OR array(SELECT unnest(redis_blocking_pids($pid[2])) ORDER BY 1) = ARRAY[$pid[1], $pid[0]]::int[]",
	't', 'redis_blocking_pids() names both readers');
works($mon, "SELECT mode, granted FROM redis_locks() WHERE pid = $pid[2]", 'exclusive|f',
	'redis_locks() shows the writer waiting');
works($s[0], 'COMMIT', '', 'one reader ends');
usleep(300_000);
works($mon, "SELECT granted FROM redis_locks() WHERE pid = $pid[2]", 'f', 'the writer still waits for the other');
works($s[1], 'COMMIT', '', 'the other ends');
($out, $err) = finish_query($s[2], 30);
is("$out$err", 't', sprintf('the writer is granted (%.2f s after it asked)', tv_interval($started)));
like($redis->command('GET', 'rw'), ours($pid[2]), 'the key holds its token');

start_query($s[$_], "SELECT redis_lock_acquire_shared_session('rw', 30000, 10000)") foreach 0, 1;
ok(waits($mon, 10, @pid[0, 1]), 'two readers wait for the writer');
is($redis->command('SET', 'rw2', 'x'), 'OK', 'meanwhile another key is free');
$started = [gettimeofday];
works($s[2], "SELECT redis_lock_release('rw')", 't', 'the writer releases');
foreach my $i (0, 1)
{
	($out, $err) = finish_query($s[$i], 30);
	is("$out$err", 't', sprintf('reader %d is granted (%.2f s after the release)', $i + 1, tv_interval($started)));
}
is($redis->command('ZCARD', 'rw'), '2', 'both read at once');
works($s[2], "SELECT redis_lock_acquire_shared('rw')", 't', 'and a third reader joins them');
works($s[2], "SELECT redis_lock_acquire('rw', 30000, 200)", 'f', 'a writer waiting 200 ms is refused');
works($s[$_], "SELECT redis_lock_release_shared('rw')", 't', 'reader ' . ($_ + 1) . ' ends') foreach 0, 1;
is($redis->command('EXISTS', 'rw'), '0', 'nothing is left');
$redis->command('SET', 'rw', 'other-writer', 'PX', 60000);
works($s[0], "SELECT redis_lock_acquire_shared('rw')", 'f', 'a reader is refused while a plain client holds the key');
$redis->command('DEL', 'rw', 'rw2');
works($mon,
	"SELECT shared_acquires, shared_waits, shared_timeouts, acquires FROM redis_stats() WHERE server = 'redislock'",
	'5|2|0|1', 'redis_stats() counts the shared acquires and waits apart from the exclusive ones');

# A stream of readers from two sessions, each taking the lock again at
# once after holding it 100 ms, for 3 s, the second 50 ms after the first,
# so that one of them always reads, does not starve a writer that comes
# after 0.5 s: the readers that come after it wait behind it.
my $reader_loop = q{
DO $$
DECLARE
	deadline timestamptz := clock_timestamp() + interval '3 s';
BEGIN
	WHILE clock_timestamp() < deadline LOOP
		PERFORM redis_lock_acquire_shared_session('stream', 30000, -1);
		PERFORM pg_sleep(0.1);
		PERFORM redis_lock_release_shared('stream');
	END LOOP;
END $$};
start_query($s[0], $reader_loop);
usleep(50_000);
start_query($s[1], $reader_loop);
usleep(450_000);
$started = [gettimeofday];
($out, $err) = session_query($s[2], "SELECT redis_lock_acquire_session('stream', 30000, 2500)");
my $waited = tv_interval($started);
is("$out$err", 't', sprintf('a writer among a stream of readers is granted (after %.2f s)', $waited));
ok($waited < 1, 'within the readers\' turns, not after the stream');
works($s[2], "SELECT redis_lock_release('stream')", 't', 'it releases');
foreach my $i (0, 1)
{
	($out, $err) = finish_query($s[$i], 30);
	is("$out$err", '', "reader loop $i ends without error");
}

# The watchdog, a lost lease, a backend's end
session_query($s[0], 'SET redislock.lease_renewal = on');
works($s[0], "BEGIN; SELECT redis_lock_acquire_shared('renewed', 1000)", 't',
	'a transaction reads with a 1 s lease');
sleep_for(3);
my ($score) = @{ $redis->command('ZRANGE', 'renewed', 0, -1, 'WITHSCORES') }[1];
my ($now) = @{ $redis->command('TIME') };
ok(defined $score && $score > $now * 1000, 'the lease watchdog renewed it for 3 s');
works($s[0], 'COMMIT', '', 'and the commit succeeds');
session_query($s[0], 'SET redislock.lease_renewal = off');
works($s[0], "BEGIN; SELECT redis_lock_acquire_shared('lost', 500)", 't',
	'a transaction reads with a 0.5 s lease, not renewed');
sleep_for(0.8);
($out, $err) = session_query($s[0], 'COMMIT');
like($err, qr/ERROR:\s+40001: Redis lock "lost" on server "redislock" was lost before commit/,
	'the lease ran out: its commit fails with 40001');

works($s[1], "SELECT redis_lock_acquire_shared_session('exit')", 't', 'a session reads "exit"');
$s[1]->quit;
ok(defined wait_until(10, sub { $redis->command('EXISTS', 'exit') eq '0' }),
	'its backend exits: its reader is gone');

works($s[2], "SELECT redis_lock_acquire_shared_session('crash', 1500)", 't',
	'a session reads "crash" with a 1.5 s lease');
my $killed = [gettimeofday];
ok(crash_restart($node, $pid[2]), 'the node restarts after the crash');
$s[2]->quit;
eval { $mon->quit; $s[0]->quit };
$mon = session($node);
my $s3 = session($node);
my ($pid3) = session_query($s3, 'SELECT pg_backend_pid()');
works($s3, "SELECT redis_lock_acquire_session('crash', 30000, 0)", 'f',
	'its backend killed, a writer is still refused after the crash restart');
($out, $err) = session_query($s3, "SELECT redis_lock_acquire_session('crash', 30000, 10000)");
my $after = tv_interval($killed);
is("$out$err", 't', sprintf('and granted once the reader\'s lease ran out (%.2f s after the kill)', $after));
ok($after >= 1.4, 'not before');
works($s3, "SELECT redis_lock_release('crash')", 't', 'released');
diag sprintf 'single Redis cases done after %d s', time - $t0;

# --- Redis Cluster, 3 masters without replicas
my $cluster = RedisCluster->start_cluster(masters => 3, replicas => 0);
my @cm = $cluster->masters;
add_server($node, 'rc', qq{cluster '${\$cluster->seeds}', key_prefix 'rw:'});
my $s4 = session($node);
my ($pid4) = session_query($s4, 'SELECT pg_backend_pid()');
session_query($_, 'SET redislock.server = rc') foreach $s3, $s4;
my $ck = user_key_on($cluster, $cm[2], 'rw:', 'k');
works($s3, "BEGIN; SELECT redis_lock_acquire_shared('$ck')", 't', 'cluster: a reader');
works($s4, "BEGIN; SELECT redis_lock_acquire_shared('$ck')", 't', 'cluster: and another');
my $readers = $cluster->command($cm[2], 'ZRANGE', "rw:$ck", 0, -1);
ok(@$readers == 2, "cluster: both on the master that serves the key (@$readers)");
works($s4, 'COMMIT', '', 'cluster: one ends');
start_query($s4, "SELECT redis_lock_acquire_session('$ck', 30000, 10000)");
ok(waits($mon, 10, $pid4), 'cluster: a writer waits for the other');
works($s3, 'COMMIT', '', 'cluster: the other ends');
($out, $err) = finish_query($s4, 30);
is("$out$err", 't', 'cluster: the writer is granted');
like($cluster->command($cm[2], 'GET', "rw:$ck"), ours($pid4), 'cluster: its token is at the key');
works($s4, "SELECT redis_lock_release('$ck')", 't', 'cluster: released');
diag sprintf 'cluster case done after %d s', time - $t0;

# --- Redlock, 3 masters
my $masters = RedisMasters->start_masters(3);
my @m = map { $masters->master($_) } 0 .. 2;
add_server($node, 'rl', qq{redlock '${\$masters->endpoints}', key_prefix 'rl:'});
session_query($s3, 'SET redislock.server = rl');

# Whether each master has our reader, as "r,r,-" ("down" for a master
# that does not answer)
sub redlock_readers
{
	return join ',', map {
		my $score = eval { $_->command('ZSCORE', 'rl:k', (grep { $_ =~ ours($pid3) } @{ $_->command('ZRANGE', 'rl:k', 0, -1) })[0] // 'none') };
		$@ ? 'down' : defined $score ? 'r' : '-';
	} @m;
}

works($s3, "BEGIN; SELECT redis_lock_acquire_shared('k')", 't', 'redlock: a reader');
is(redlock_readers(), 'r,r,r', 'redlock: on every master');
works($s3, 'COMMIT', '', 'redlock: commit');
is(redlock_readers(), '-,-,-', 'redlock: gone from every master');
$m[$_]->command('SET', 'rl:k', 'other', 'PX', 60000) foreach 0, 1;
works($s3, "SELECT redis_lock_acquire_shared_session('k')", 'f',
	'redlock: a foreign writer on 2 of 3 masters refuses a reader');
ok(defined wait_until(5, sub { redlock_readers() =~ /\A[^r]*\z/ }),
	'redlock: none of ours is left on any master: ' . redlock_readers());
$m[$_]->command('DEL', 'rl:k') foreach 0 .. 2;
$m[2]->kill9;
works($s3, "BEGIN; SELECT redis_lock_acquire_shared('k')", 't', 'redlock: one master killed, a reader is granted');
is(redlock_readers(), 'r,r,down', 'redlock: by the two others');
works($s3, 'COMMIT', '', 'redlock: commit');
diag sprintf 'redlock case done after %d s', time - $t0;

# --- Sentinel: a master under one Sentinel
my $group = RedisSentinel->start_sentinel_group(replicas => 0, sentinels => 1);
my $master = $group->master_port;
add_server($node, 'ha', $group->server_options . ", key_prefix 'ha:'");
session_query($s3, 'SET redislock.server = ha');
works($s3, "BEGIN; SELECT redis_lock_acquire_shared('k')", 't', 'sentinel: a reader');
is($group->command($master, 'ZCARD', 'ha:k'), '1', 'sentinel: on the master');
works($s3, 'COMMIT', '', 'sentinel: commit');
is($group->command($master, 'EXISTS', 'ha:k'), '0', 'sentinel: gone');

$_->quit foreach ($s3, $s4, $mon);
$node->stop;
diag sprintf 'whole test took %d s', time - $t0;

done_testing();
