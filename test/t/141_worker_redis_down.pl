# Stock recovery after a crash while Redis is down: the worker fails,
# logs it and tries again after pauses that grow, without crashing; once
# Redis is back, the open decrement is given back within 15 s, with nobody
# calling anything.  Redis keeps its data through the outage (it is saved
# before Redis is killed, and loaded when it starts again).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use RedisLockTest qw(session_query wait_until);

my $redis = RedisLockTest->start_redis();
my $node  = RedisLockTest->new_node('down', $redis,
	conf => "shared_preload_libraries = 'redislock'");

$node->safe_psql('postgres', "SELECT redis_stock_set('a', 100)");
is($node->safe_psql('postgres', "SELECT redis_stock_decr('a', 1, 'c1')"), '99',
	'a committed order');
my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
my ($out, $err) = session_query($s, "BEGIN; SELECT redis_stock_decr('a', 5, 'u1')");
is("$out$err", '94', 'and an uncommitted one');
is($redis->command('SAVE'), 'OK', 'Redis saves its data');

# Redis dies, then PostgreSQL crashes; PostgreSQL starts without Redis.
$redis->kill9;
my $log_offset = -s $node->logfile;
$node->stop('immediate');
$node->start;
$s->quit;
my $t0 = time;

my $failure = qr/^(\S+ \S+) .*LOG:  could not recover Redis stock on server "redislock" in database "postgres"$/m;
ok(defined wait_until(10, sub { slurp_file($node->logfile, $log_offset) =~ $failure }),
	'the worker cannot reach Redis, and logs it');
sleep(10 - (time - $t0)) if time - $t0 < 10;

my $log = slurp_file($node->logfile, $log_offset);
my @tries;
while ($log =~ /$failure/g)
{
	my ($h, $m, $sec) = (split / /, $1)[1] =~ /(\d+):(\d+):([\d.]+)/;
	push @tries, $h * 3600 + $m * 60 + $sec;
}
cmp_ok(scalar @tries, '>=', 3, 'it tried at least three times in 10 s')
  or diag($log);
my @pauses = map { $tries[$_] - $tries[ $_ - 1 ] } 1 .. $#tries;
ok((grep { $pauses[$_] <= $pauses[ $_ - 1 ] } 1 .. $#pauses) == 0,
	'each time after a longer pause')
  or diag("pauses: @pauses");
unlike($log, qr/\b(PANIC|FATAL):|exited with exit code [^01]|terminated by signal/,
	'nothing crashed');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'redislock launcher'"),
	'1', 'the launcher runs');

$redis->restart;
is($redis->command('GET', 'a'), '94', 'Redis is back, with its data');
my $t1 = time;
my $secs = wait_until(15, sub { $redis->command('GET', 'a') eq '99' });
ok(defined $secs,
	sprintf 'the open decrement is given back within 15 s of Redis coming back (%.1f s; %.1f s after the start)',
	time - $t1, time - $t0);
like(slurp_file($node->logfile, $log_offset),
	qr/LOG:  gave back 5 units of Redis stock on server "redislock" in database "postgres"/,
	'and the worker logs it');
is($node->safe_psql('postgres', "SELECT redis_stock_decr('a', 1, 'c1')"), '-2',
	'the committed order still counts');

$node->stop;
$redis->stop;

done_testing();
