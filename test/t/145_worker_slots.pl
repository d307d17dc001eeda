# redislock takes a bounded number of background workers, and a renewal
# that finds no room says so.  With redislock.max_workers = 1 and
# max_worker_processes = 5, six databases each hold a lock with a 1 s
# lease, while the launcher recovers stock every second:
# - there are never more than max_workers + 2 redislock processes (the
#   launcher, one recovery worker, the database workers);
# - each lock is either renewed (no foreign client gets its key for 3 s,
#   and it is released as ours) or its acquire warned that no worker is
#   free to renew it; the locks of five databases warned.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RedisLockTest qw(session_query);

my $redis = RedisLockTest->start_redis();
my $port = $redis->port;
my $node = RedisLockTest->new_node('slots', $redis, conf => join("\n",
		"shared_preload_libraries = 'redislock'",
		'max_worker_processes = 5',
		'redislock.max_workers = 1',
		"redislock.recover_interval = '1s'"));

my @dbs = map { "d$_" } 1 .. 6;
my %session;
foreach my $db (@dbs)
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, qq{
		CREATE EXTENSION redislock;
		ALTER SERVER redislock OPTIONS (SET port '$port');
	});
	$session{$db} = $node->background_psql($db, on_error_stop => 0, timeout => 60);
}

my %warned;
foreach my $db (@dbs)
{
	my ($out, $err) = session_query($session{$db},
		"SELECT redis_lock_acquire_session('slots:$db', 1000)");
	is($out, 't', "a session of $db takes a lock with a 1 s lease");
	$warned{$db} = $err =~ /WARNING:  no redislock worker is free to renew the lease of this lock/;
}

my %bad = map { $_ => 0 } @dbs;
my $most = 0;
my $end = time + 3;
while (time < $end)
{
	foreach my $db (@dbs)
	{
		my $set = $redis->command('SET', "slots:$db", 'foreign', 'NX', 'PX', '60000');
		$bad{$db}++ if defined $set && $set eq 'OK';
		$bad{$db}++ if $redis->command('PTTL', "slots:$db") <= 0;
	}
	my $n = $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'redislock%'");
	$most = $n if $n > $most;
	usleep(100_000);
}
cmp_ok($most, '<=', 3, "at most max_workers + 2 redislock processes ran at once ($most)");

foreach my $db (@dbs)
{
	my ($released) = session_query($session{$db},
		"SELECT redis_lock_release('slots:$db')");
	ok($warned{$db} || ($bad{$db} == 0 && $released eq 't'),
		"the lock of $db was renewed for 3 s, or its acquire warned");
}
is(scalar(grep { $warned{$_} } @dbs), 5,
	'the acquires of five databases warned: the one worker slot serves the first');

$session{$_}->quit foreach @dbs;
$node->stop;
$redis->stop;

done_testing();
