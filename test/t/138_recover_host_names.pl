# After a crash restart, shared memory is new: no session has looked up
# any host name yet.  The stock recovery worker, which renews nothing, looks
# the names of its servers up itself, so a decrement that the crash left
# open on a server named 'localhost' is given back with nobody calling
# anything.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query wait_until);

my $redis = RedisLockTest->start_redis();
my $port = $redis->port;
my $node = RedisLockTest->new_node('recover_names', $redis,
	conf => "shared_preload_libraries = 'redislock'\nrestart_after_crash = on");
$node->safe_psql('postgres', qq{
	ALTER SERVER redislock OPTIONS (SET host 'localhost', SET port '$port');
	SELECT redis_stock_set('n', 10);
});

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
my ($out, $err) = session_query($s,
	"BEGIN; SELECT redis_stock_decr('n', 3, 'open'), pg_backend_pid()");
my ($left, $pid) = split /\|/, $out;
is($left, '7', 'a decrement in a transaction left open');

kill 'KILL', $pid;
my $secs = wait_until(20, sub { ($redis->command('GET', 'n') // '') eq '10' });
ok(defined $secs,
	sprintf 'after the crash restart, its units come back, nobody calling anything (%.2f s)',
	$secs // 20);
eval { $s->quit };

$node->stop;
done_testing();
