# With redislock preloaded and a server named by host name ('localhost',
# which the system's hosts file knows), the database's worker renews leases
# and wakes waiters.  The worker looks no name up itself: it connects to
# the addresses that the sessions' SQL calls found for the name.
# - a transaction holds a lock with a 1 s lease for 4 s: the key keeps the
#   holder's token all along, the renewals are counted, and COMMIT, with
#   verify_before_commit, succeeds; the same for a session lock held by an
#   idle session, which then releases it;
# - three waiters on B, for locks that a session of another PostgreSQL
#   server, A, holds on the same Redis, are listened for by B's worker, on
#   one subscription connection (a backend that the worker cannot serve
#   subscribes on a connection of its own), and each gets its lock as soon
#   as A releases it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use RedisLockTest qw(session_query wait_until session works);
use WakeTest qw(new_session waits start_timed_wait release_at granted_after);

my $redis = RedisLockTest->start_redis();
my $port = $redis->port;
my $node = RedisLockTest->new_node('names_b', $redis,
	conf => "shared_preload_libraries = 'redislock'\n"
	  . "redislock.recover_interval = 0");
$node->safe_psql('postgres',
	"ALTER SERVER redislock OPTIONS (SET host 'localhost', SET port '$port')");
my $other = RedisLockTest->new_node('names_a', $redis);

# How many times, looking every 200 ms for $seconds, the key did not carry
# the owner token it carries at the start
sub lapses
{
	my ($key, $seconds) = @_;
	my $owner = $redis->command('GET', $key);
	my $lapses = 0;
	for (my $end = time + $seconds; time < $end; usleep(200_000))
	{
		$lapses++ if ($redis->command('GET', $key) // '') ne $owner;
	}
	return $lapses;
}

# The CLIENT LIST lines of the Redis clients subscribed to a channel
sub subscribed
{
	return grep { /\b(?:sub|ssub)=[1-9]/ } split /\n/, $redis->cli('CLIENT', 'LIST');
}

my $holder = session($node);
my $viewer = session($node);

# --- a 1 s lease held through a 4 s transaction, and by an idle session
foreach my $case (
	[ 'xact', "BEGIN; SELECT redis_lock_acquire('hn:xact', 1000)", 'COMMIT', '' ],
	[
		'session', "SELECT redis_lock_acquire_session('hn:session', 1000)",
		"SELECT redis_lock_release('hn:session')", 't'
	])
{
	my ($scope, $acquire, $end, $ended) = @$case;
	works($holder, $acquire, 't', "$scope: a lock with a 1 s lease on host 'localhost'");
	is(lapses("hn:$scope", 4), 0, "$scope: for 4 s, the key keeps the holder's token");
	my ($renewals) = session_query($viewer,
		"SELECT renewals FROM redis_locks() WHERE key = 'hn:$scope'");
	cmp_ok($renewals, '>=', 3, "$scope: the worker renewed the lease ($renewals times)");
	works($holder, $end, $ended, "$scope: $end succeeds");
	is($redis->command('EXISTS', "hn:$scope"), '0', "$scope: and released the lock");
}
$_->quit for ($holder, $viewer);

# --- waiters listened for by the worker, on one subscription connection
my $holder_a = new_session($other);
my @waiters = map { new_session($node) } 1 .. 3;
for my $i (1 .. 3)
{
	session_query($holder_a, "SELECT redis_lock_acquire_session('hn:wake$i')");
	start_timed_wait($waiters[ $i - 1 ], "hn:wake$i");
	waits($node, $waiters[ $i - 1 ]);
}
ok(defined wait_until(5, sub { my @s = subscribed(); @s == 1 && $s[0] =~ /\bssub=3\b/ }),
	"three waiters: the worker listens to their wake channels on one connection");
for my $i (1 .. 3)
{
	my ($granted, $secs) =
	  granted_after($waiters[ $i - 1 ], release_at($holder_a, "hn:wake$i"));
	is($granted, 't', "waiter $i got the lock when A released it");
	cmp_ok($secs, '<', 1, "within 1 s ($secs s)");
}

$_->quit for ($holder_a, @waiters);
$node->stop;
$other->stop;
$redis->stop;

done_testing();
