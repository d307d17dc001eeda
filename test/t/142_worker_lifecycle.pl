# The workers of a preloaded redislock are ones PostgreSQL can trust:
# - they show in pg_stat_activity with a backend_type that names redislock,
#   and wait as extension waits;
# - the launcher exits within 1 s of SIGTERM and comes back;
# - after a SIGKILL of the launcher, or of a recovery worker, the server
#   restarts, and so do they: the stock is exact afterwards;
# - a recovery worker waiting on a Redis that answers nothing exits within
#   1 s of SIGTERM, and is started again;
# - DROP DATABASE is not blocked by a recovery worker in that database,
#   however long its Redis takes;
# - a smart shutdown completes within 5 s, while a worker waits on Redis.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use RedisLockTest qw(session_query wait_until crash_restart);

my $redis   = RedisLockTest->start_redis();
my $stalled = RedisLockTest->start_redis();
my $node    = RedisLockTest->new_node('life', $redis, conf => join("\n",
		"shared_preload_libraries = 'redislock'",
		'restart_after_crash = on',
		"redislock.connect_timeout = '60s'",
		"redislock.command_timeout = '60s'"));

# The pid of the process of $type (and of database $db), or '' if none.
sub pid_of
{
	my ($type, $db) = @_;
	my $where = defined $db ? "datname = '$db'" : 'datname IS NULL';
	return $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = '$type' AND $where");
}

# Wait for a process of $type (in $db) other than $old to run; its pid.
sub new_pid_of
{
	my ($type, $db, $old, $limit) = @_;
	my $pid;
	wait_until($limit, sub { $pid = pid_of($type, $db); $pid ne '' && $pid ne $old });
	return $pid;
}

# Wait for process $pid to be gone; the seconds it took, or undef.
sub gone
{
	my ($pid, $limit) = @_;
	return wait_until($limit, sub { !kill(0, $pid) });
}

# --- the launcher in pg_stat_activity
my $launcher = new_pid_of('redislock launcher', undef, '', 10);
isnt($launcher, '', 'the launcher shows in pg_stat_activity with its backend_type');
# PostgreSQL 17 names an extension's wait events
my $wait_event = $node->safe_psql('postgres', 'SHOW server_version_num') >= 170000
  ? 'RedisLock' : 'Extension';
is( $node->safe_psql('postgres',
		"SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = $launcher"),
	"Extension|$wait_event", "and waits as an extension, in wait event $wait_event");

# --- SIGTERM of the launcher
kill 'TERM', $launcher;
my $secs = gone($launcher, 5);
ok(defined $secs && $secs < 1,
	sprintf 'the launcher exits within 1 s of SIGTERM (%.2f s)', $secs // -1);
$launcher = new_pid_of('redislock launcher', undef, $launcher, 15);
isnt($launcher, '', 'and comes back');

# --- SIGKILL of the launcher, with an open decrement
$node->safe_psql('postgres', "SELECT redis_stock_set('a', 10)");
my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
my ($out, $err) = session_query($s, "BEGIN; SELECT redis_stock_decr('a', 3)");
is("$out$err", '7', 'an open decrement');
ok(crash_restart($node, $launcher), 'after a SIGKILL of the launcher, the server restarts');
$s->quit;
$launcher = new_pid_of('redislock launcher', undef, $launcher, 15);
isnt($launcher, '', 'and so does the launcher');
ok(defined wait_until(15, sub { $redis->command('GET', 'a') eq '10' }),
	'which gives back the open decrement: the stock is exact');

# --- a recovery worker that waits on a Redis that answers nothing
my $stalled_port = $stalled->port;
$node->safe_psql('postgres', 'CREATE DATABASE stuck');
$node->safe_psql('stuck', qq{
	CREATE EXTENSION redislock;
	ALTER SERVER redislock OPTIONS (SET port '$stalled_port');
});
$stalled->pause;
$node->restart;
my $recovery = new_pid_of('redislock recovery', 'stuck', '', 15);
isnt($recovery, '', 'after a restart, a recovery worker runs in the database whose Redis answers nothing');
ok(defined wait_until(10, sub {
			$node->safe_psql('postgres',
				"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $recovery") eq
			  'Extension' }),
	'and waits on it as an extension');

kill 'TERM', $recovery;
$secs = gone($recovery, 5);
ok(defined $secs && $secs < 1,
	sprintf 'a recovery worker waiting on Redis exits within 1 s of SIGTERM (%.2f s)', $secs // -1);
$recovery = new_pid_of('redislock recovery', 'stuck', $recovery, 15);
isnt($recovery, '', 'and is started again, its work not done');

ok(crash_restart($node, $recovery), 'after a SIGKILL of a recovery worker, the server restarts');
$recovery = new_pid_of('redislock recovery', 'stuck', $recovery, 15);
isnt($recovery, '', 'and the recovery worker is back');

my $t0 = time;
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE stuck');
my $took = time - $t0;
is("$ret$stderr", '0', 'DROP DATABASE succeeds while a recovery worker there waits on Redis');
cmp_ok($took, '<', 5, sprintf 'without waiting for it to time out (%.2f s)', $took);
ok(defined gone($recovery, 5), 'the recovery worker of that database is gone');

$t0 = time;
$node->stop('smart');
$took = time - $t0;
cmp_ok($took, '<', 5,
	sprintf 'a smart shutdown completes within 5 s while a worker waits on Redis (%.2f s)', $took);

$stalled->resume;
$stalled->stop;
$redis->stop;

done_testing();
