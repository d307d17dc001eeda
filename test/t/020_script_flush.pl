# SCRIPT FLUSH between calls: Redis forgets the Lua scripts, answers the
# next EVALSHA with NOSCRIPT, and the extension loads the script and runs
# the call again, transparently and exactly once.  The script SHA-1s are
# read from Redis' slow log (every command logged), so that the test does
# not depend on the script texts.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query);

# One counter of INFO commandstats, e.g. cmdstat($redis, 'script|load', 'calls')
sub cmdstat
{
	my ($redis, $command, $field) = @_;
	my $info = $redis->cli('INFO', 'commandstats');
	return $info =~ /^cmdstat_\Q$command\E:.*\b$field=(\d+)/m ? $1 : 0;
}

# The SHA-1s of the scripts that one statement of the session ran by
# EVALSHA, as the slow log shows them.
sub shas_run_by
{
	my ($redis, $session, $sql) = @_;
	$redis->cli('SLOWLOG', 'RESET');
	session_query($session, $sql);
	my @lines = split /\n/, $redis->cli('SLOWLOG', 'GET', '1000');
	my %sha;
	for my $i (0 .. $#lines - 1)
	{
		$sha{ $lines[ $i + 1 ] } = 1 if $lines[$i] =~ /^evalsha$/i;
	}
	return sort keys %sha;
}

sub script_exists
{
	my ($redis, $sha) = @_;
	return $redis->cli('SCRIPT', 'EXISTS', $sha);
}

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('flush', $redis);
$redis->cli('CONFIG', 'SET', 'slowlog-log-slower-than', '0');
$redis->cli('CONFIG', 'SET', 'slowlog-max-len', '1000');

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 30);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
my ($out, $err);

# Run each script once, alone, so that the slow log names its SHA-1.
$node->safe_psql('postgres', "SELECT redis_stock_set('st', 10)");
my %script;
my @shas;
@shas = shas_run_by($redis, $s, "SELECT redis_lock_acquire_session('f0', 30000)");
is(scalar(@shas), 1, 'acquiring a session lock runs one script');
$script{acquire} = $shas[0];
@shas = shas_run_by($redis, $s, "SELECT redis_lock_release('f0')");
is(scalar(@shas), 1, 'releasing it runs one script');
$script{release} = $shas[0];
@shas = shas_run_by($redis, $s, "SELECT redis_stock_decr('st', 1)");
is(scalar(@shas), 1, 'a decrement in autocommit runs one script');
$script{decr} = $shas[0];
is($redis->cli('GET', 'st'), '9', 'stock after the warm-up');

for my $name (sort keys %script)
{
	like($script{$name} // '', qr/^[0-9a-f]{40}$/,
		"the $name script was run by EVALSHA");
}
isnt($script{acquire}, $script{release}, 'acquire and release are different scripts');
is(script_exists($redis, $script{acquire}), '1', 'acquire script is cached');

# --- acquire after a flush
is($redis->cli('SCRIPT', 'FLUSH'), 'OK', 'SCRIPT FLUSH');
is(script_exists($redis, $script{acquire}), '0', 'flushed: acquire script is gone');
$redis->cli('CONFIG', 'RESETSTAT');

($out, $err) = session_query($s, "SELECT redis_lock_acquire_session('f1', 30000)");
is($out, 't', 'session lock taken after SCRIPT FLUSH');
is($err, '', 'without any message');
like($redis->cli('GET', 'f1'), qr/^pg:/, 'the lock is in Redis');
is(script_exists($redis, $script{acquire}), '1', 'acquire script was loaded again');
is(cmdstat($redis, 'script|load', 'calls'), 1, 'by one SCRIPT LOAD');
is(cmdstat($redis, 'evalsha', 'failed_calls'), 1, 'after one NOSCRIPT answer');
is(cmdstat($redis, 'evalsha', 'calls'), 2, 'and the call was run again once');

# --- release after a flush
$redis->cli('SCRIPT', 'FLUSH');
$redis->cli('CONFIG', 'RESETSTAT');
($out, $err) = session_query($s, "SELECT redis_lock_release('f1')");
is($out, 't', 'session lock released after SCRIPT FLUSH');
is($err, '', 'without any message');
is($redis->cli('EXISTS', 'f1'), '0', 'the lock is gone from Redis');
is(script_exists($redis, $script{release}), '1', 'release script was loaded again');
is(cmdstat($redis, 'script|load', 'calls'), 1, 'by one SCRIPT LOAD');

# --- stock decrement after a flush: applied exactly once
$redis->cli('SCRIPT', 'FLUSH');
$redis->cli('CONFIG', 'RESETSTAT');
($out, $err) = session_query($s, "SELECT redis_stock_decr('st', 2)");
is($out, '7', 'stock decremented after SCRIPT FLUSH');
is($err, '', 'without any message');
is($redis->cli('GET', 'st'), '7', 'the decrement was applied exactly once');
is(script_exists($redis, $script{decr}), '1', 'decrement script was loaded again');
is(cmdstat($redis, 'script|load', 'calls'), 1, 'by one SCRIPT LOAD');

# --- transaction end after a flush: verify and release at commit
session_query($s, 'BEGIN');
($out) = session_query($s, "SELECT redis_lock_acquire('f2', 30000)");
is($out, 't', 'transaction lock taken');
$redis->cli('SCRIPT', 'FLUSH');
$redis->cli('CONFIG', 'RESETSTAT');
($out, $err) = session_query($s, 'COMMIT');
is($err, '', 'COMMIT after SCRIPT FLUSH succeeds without any message');
is($redis->cli('EXISTS', 'f2'), '0', 'the lock was released at commit');
cmp_ok(cmdstat($redis, 'script|load', 'calls'), '>=', 2,
	'the verify and release scripts were loaded again');

# --- rollback after a flush: several keys and two missing scripts, pipelined
session_query($s, 'BEGIN');
($out) = session_query(
	$s, q{
	SELECT redis_lock_acquire('f3', 30000);
	SELECT redis_lock_acquire('f4', 30000);
	SELECT redis_stock_decr('st', 3);
});
is($out, "t\nt\n4", 'two locks and a decrement in a transaction');
$redis->cli('SCRIPT', 'FLUSH');
$redis->cli('CONFIG', 'RESETSTAT');
($out, $err) = session_query($s, 'ROLLBACK');
is($err, '', 'ROLLBACK after SCRIPT FLUSH without any message');
is($redis->cli('EXISTS', 'f3', 'f4'), '0', 'both locks were released');
is($redis->cli('GET', 'st'), '7', 'the decrement was given back exactly once');
is(cmdstat($redis, 'script|load', 'calls'), 2,
	'release and give-back scripts each loaded once');

# --- a new backend after a flush works too (scripts are Redis-wide)
$redis->cli('SCRIPT', 'FLUSH');
is( $node->safe_psql(
		'postgres', "SELECT redis_lock_acquire('f5', 30000), redis_stock_decr('st')"),
	't|6',
	'a new session works after SCRIPT FLUSH');
is($redis->cli('EXISTS', 'f5'), '0', 'its lock was released at commit');

$s->quit;
$node->stop;
$redis->stop;

done_testing();
