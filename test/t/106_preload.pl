# redislock in shared_preload_libraries: the postmaster starts (nothing in
# _PG_init needs a resource owner or a transaction), locks and stock work
# in its backends, and a backend's session locks are released when it exits
# (the exit callback is registered per backend), normally or terminated.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query wait_until terminate_backend);

my $redis = RedisLockTest->start_redis();
my $node = PostgreSQL::Test::Cluster->new('preload');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'redislock'");
ok($node->start(fail_ok => 1), 'the server starts with redislock preloaded');
RedisLockTest->setup_node($node, $redis);
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'), 'redislock',
	'and has it loaded');

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
my ($out, $err) = session_query(
	$s, q{
	SELECT redis_lock_acquire_session('pl', 60000);
	BEGIN;
	SELECT redis_lock_acquire('tl', 60000);
	SELECT redis_stock_set('st', 5);
	SELECT redis_stock_decr('st', 2, 'b');
	ROLLBACK;
	SELECT redis_stock_get('st');
	SELECT redis_stock_decr('st', 1, 'b');
});
is("$out$err", "t\nt\n\n3\n5\n4", 'locks and stock work, a rollback gives back');
is($redis->command('EXISTS', 'pl', 'tl'), '1',
	'the session lock is held, the transaction lock released');
$s->quit;
ok(defined wait_until(10, sub { $redis->command('EXISTS', 'pl') eq '0' }),
	'the session lock is released when its backend exits');

$s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
($out) = session_query($s,
	"SELECT redis_lock_acquire_session('pl2', 60000), pg_backend_pid()");
my ($got, $pid) = split /\|/, $out;
is($got, 't', 'another backend takes a session lock');
ok(terminate_backend($node, $pid), 'and is terminated');
ok(defined wait_until(10, sub { $redis->command('EXISTS', 'pl2') eq '0' }),
	'its lock is released at exit too');
$s->quit;

$node->restart;
is($node->safe_psql('postgres',
	"SELECT redis_lock_acquire('pl3'), redis_stock_get('st')"),
	't|4', 'after a restart, still preloaded, it works');

$node->stop;
$redis->stop;

done_testing();
