# A single-user backend (postgres --single, the mode for repairs that
# cannot wait for a postmaster) has no postmaster whose death it could
# watch.  Its calls to Redis wait on the socket and the latch alone: a
# lock is taken and released, and a decrement commits and is given back,
# as in any other backend.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest;

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('single', $redis);
$node->safe_psql('postgres', 'CREATE TABLE orders (remaining bigint)');
is($redis->cli('SET', 'st', '5'), 'OK', 'stock "st" is 5');
is($redis->cli('SET', 'single:busy', 'other', 'PX', '60000'),
	'OK', 'another client holds "single:busy"');
$node->stop;

# Each line is one query string; the backend prints the rows it returns.
my $statements = join "\n",
  q{BEGIN; SELECT redis_lock_acquire('single:lock') AS taken;}
  . q{ SELECT redis_lock_release('single:lock') AS released; COMMIT;},
  q{SELECT redis_lock_acquire('single:ended') AS taken_to_the_end},
  q{SELECT redis_lock_acquire_session('single:held', 60000) AS held},
  q{SELECT redis_lock_acquire('single:busy', 30000, 300) AS busy},
  q{INSERT INTO orders SELECT redis_stock_decr('st')},
  q{BEGIN; SELECT redis_stock_decr('st', 2) AS left_before_rollback; ROLLBACK;},
  '';
my $bindir = $node->config_data('--bindir');
my ($stdout, $stderr);
IPC::Run::run(
	[ "$bindir/postgres", '--single', '-D', $node->data_dir, 'postgres' ],
	'<', \$statements, '>', \$stdout, '2>', \$stderr);

unlike($stderr, qr/ERROR|FATAL|PANIC/, 'no statement fails')
  or diag($stderr);
like($stdout, qr/taken = "t"/, 'the lock is taken');
like($stdout, qr/released = "t"/, 'and released');
like($stdout, qr/taken_to_the_end = "t"/, 'a lock is taken to the transaction end');
like($stdout, qr/held = "t"/, 'a session lock is taken');
like($stdout, qr/busy = "f"/, 'a lock held elsewhere is waited for, in vain');
like($stdout, qr/left_before_rollback = "2"/,
	'a decrement that rolls back took its units first');
is($redis->cli('EXISTS', 'single:lock'), '0',
	'the released lock is gone from Redis');
is($redis->cli('EXISTS', 'single:ended'), '0',
	'the lock taken to the end is gone with its transaction');
is($redis->cli('EXISTS', 'single:held'), '0',
	'the session lock is released as the backend exits');
is($redis->cli('GET', 'st'), '4',
	'the committed decrement took its unit, the rolled-back one gave back');

$node->start;
is($node->safe_psql('postgres', 'SELECT remaining FROM orders'),
	'4', 'the committed order row is there');
$node->stop;

done_testing();
