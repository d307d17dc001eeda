# A Redis Cluster slot migrated, step by step, while one session holds
# locks in it and others decrement an item in it (CLUSTER SETSLOT
# IMPORTING/MIGRATING, MIGRATE of chosen keys, SETSLOT NODE):
# - with the slot open and a key's keys moved, the source answers ASK and
#   the call reaches the target (extend, stock get, decrement, give-back at
#   rollback, commit check and release); keys not moved are served by the
#   source;
# - a call whose keys are on neither node yet (a new lock) meets TRYAGAIN:
#   with a short command_timeout it is a class 08 error, with a long one it
#   waits and succeeds once the slot has moved (then MOVED);
# - after the migration MOVED is followed, and redis_server_nodes() shows
#   the slot on the target;
# - locks are released at commit (on whichever node their key was), the
#   stock is exact (what remains = initial - the committed decrements), no
#   decrement record is left (a commit's clean-up that went to the source
#   through a stale map is sent on to the target when the session next
#   reads from the source), and the source has no key of the slot left.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisCluster;
use RedisClusterTest qw(new_cluster_node session works);
use RedisLockTest qw(session_query start_query finish_query wait_until key_slot);

my $t0 = time;
my $cluster = RedisCluster->start_cluster(masters => 3, replicas => 1, node_timeout => 1000);
diag sprintf 'cluster of 6 nodes up in %d s', time - $t0;

my $node = new_cluster_node(
	'migration', $cluster,
	key_prefix => 'm:',
	sql        => 'ALTER DATABASE postgres SET redislock.command_timeout = 30000');

# Every key of the test is in the slot of hash tag "mig".
my $slot = key_slot('mig');
my $from = $cluster->slot_owner($slot);
my ($to) = grep { $_ != $from } $cluster->masters;
my $item = '{mig}:item';

my ($sa, $sb, $sc, $sd) = map { session($node) } 1 .. 4;
my ($out, $err, $secs);

# The keys of the slot on the master on $port, sorted (SCAN is not
# redirected, so this is what the node itself holds).
sub keys_on
{
	my ($port) = @_;
	return grep { key_slot($_) == $slot } $cluster->node($port)->keys('m:*');
}

# Move the given Redis keys from the source to the target.
sub move_keys
{
	my (@keys) = @_;
	$cluster->command_ok($from, 'MIGRATE', '127.0.0.1', $to, '', 0, 5000, 'KEYS', @keys);
	return;
}

# The key kept beside $key for $kind on the source.
sub sibling
{
	my ($kind, $key) = @_;
	return $cluster->node($from)->sibling('m:', $kind, $key) // die "no $kind sibling of $key";
}

# The decrements that commit, to check the stock at the end.
my $initial = 100;
my $committed = 0;

# --- before: locks held, an item sold, a sale open
works($sb, "SELECT redis_stock_set('$item', $initial); SELECT redis_stock_decr('$item', 1)",
	"\n99", 'an item in the slot, one unit sold');
$committed += 1;
works($sc, "BEGIN; SELECT redis_stock_decr('$item', 2, 'carol')", '97',
	'a sale of two units is open in another session');
$committed += 2;
works($sa,
	"SELECT redis_lock_acquire_session('{mig}:s', 60000); BEGIN;"
	  . " SELECT redis_lock_acquire('{mig}:l1', 60000), redis_lock_acquire('{mig}:l2', 60000),"
	  . " redis_lock_acquire('elsewhere', 60000)",
	"t\nt|t|t", 'a session lock and three transaction locks, two in the slot');
is( join(' ', grep { !/:(fence|ops|buyers):/ } keys_on($from)),
	"m:$item m:{mig}:l1 m:{mig}:l2 m:{mig}:s",
	'the source holds the locks and the item');

# --- the slot opens; nothing has moved
$cluster->begin_migration($slot, $from, $to);
works($sb, "SELECT redis_stock_decr('$item', 1, 'b1')", '96',
	'open slot, nothing moved: a decrement is served by the source');
$committed += 1;

session_query($sd, 'SET redislock.command_timeout = 300');
($out, $err, $secs) = session_query($sd, "SELECT redis_lock_acquire('{mig}:n1', 60000)");
like($err, qr/ERROR:\s+08\w{3}: /,
	'a new lock, whose keys are on neither node, meets TRYAGAIN: class 08 after command_timeout');
cmp_ok($secs, '>=', 0.25, 'not before command_timeout has run out (it was retried)');
cmp_ok($secs, '<', 10, 'and within a bounded time');
session_query($sd, 'RESET redislock.command_timeout');
my ($pid_d) = session_query($sd, 'SELECT pg_backend_pid()');
start_query($sd, "BEGIN; SELECT redis_lock_acquire('{mig}:l3', 60000)");

# --- one lock's keys moved: ASK for it, the source for the others
move_keys('m:{mig}:l1', sibling('fence', '{mig}:l1'));
works($sa, "SELECT redis_lock_extend('{mig}:l1', 60000)", 't',
	'a lock whose keys moved is extended through ASK');
ok((grep { $_ eq 'm:{mig}:l1' } keys_on($to)), 'its key is on the target');
works($sa, "SELECT redis_lock_extend('{mig}:l2', 60000)", 't',
	'a lock whose keys did not move is extended on the source');

# --- the item's keys moved
move_keys("m:$item", sibling('ops', $item), sibling('buyers', $item));
works($sb, "SELECT redis_stock_get('$item')", '96', 'the stock is read through ASK');
works($sb, "SELECT redis_stock_decr('$item', 1, 'b2')", '95', 'a decrement is made through ASK');
$committed += 1;
works($sb, "BEGIN; SELECT redis_stock_decr('$item', 5, 'b3')", '90', 'another, in a transaction');
works($sb, "ROLLBACK; SELECT redis_stock_get('$item')", '95', 'given back through ASK at rollback');
works($sb, "SELECT redis_stock_decr('$item', 1, 'b1')", '-2', 'the buyers moved with the item');

# --- commit with one lock on each node of the slot
works($sa, 'COMMIT', '', 'the lock holder commits (check and release on both nodes)');
works($sa, "SELECT redis_lock_release('{mig}:s')", 't', 'and releases its session lock');
is(join(' ', grep { /^m:\{mig\}:[ls]/ } keys_on($from), keys_on($to)), '',
	'no lock key is left on the source or the target');
is($cluster->command($cluster->master_for_key('m:elsewhere'), 'EXISTS', 'm:elsewhere'), '0',
	'the lock outside the slot is released too');

ok( !defined wait_until(
		2,
		sub {
			(session_query($sb, "SELECT state FROM pg_stat_activity WHERE pid = $pid_d"))[0] ne
			  'active';
		}),
	'the new lock is still waiting for the slot after 2 s');
is(join(' ', grep { /l3/ } keys_on($from), keys_on($to)), '', 'and is on neither node');

# --- the migration ends
$cluster->finish_migration($slot, $from, $to);
is($cluster->slot_owner($slot), $to, "slot $slot is on port $to");
($out, $err) = finish_query($sd, 30);
is("$out$err", 't', 'the waiting lock is taken once the slot has moved');
is($cluster->command($to, 'EXISTS', 'm:{mig}:l3'), '1', 'on the target');
works($sd, 'COMMIT', '', 'and released at commit');
is($cluster->command($to, 'EXISTS', 'm:{mig}:l3'), '0', 'from the target');

works($sb, "SELECT redis_stock_decr('$item', 1, 'b4')", '94', 'a decrement follows MOVED');
$committed += 1;
works($sc, 'COMMIT', '', 'the open sale commits');
works($sc, "SELECT redis_stock_get('$item')", $initial - $committed,
	'its next call reads the redirection of the clean-up sent after commit');
works($sa, "BEGIN; SELECT redis_lock_acquire('{mig}:l1', 60000); COMMIT", 't',
	'a lock is taken and released after MOVED');
is($cluster->command($to, 'EXISTS', 'm:{mig}:l1'), '0', 'and is gone');

($out, $err) = session_query($sb,
	"SELECT endpoint, slots FROM redis_server_nodes() WHERE role = 'master'");
my ($owner) = grep {
	my (undef, $slots) = split /\|/;
	grep { my ($lo, $hi) = split /-/; $slot >= $lo && $slot <= ($hi // $lo) } split /,/, $slots // '';
} split /\n/, $out;
like($owner // '', qr/^127\.0\.0\.1:$to\|/, "redis_server_nodes() shows slot $slot on port $to");

# --- the end state
is($cluster->command($from, 'CLUSTER', 'COUNTKEYSINSLOT', $slot), '0',
	'the source has no key of the slot');
is($cluster->command($to, 'GET', "m:$item"), $initial - $committed,
	"the stock is exact: $initial - $committed committed units");
works($sb, "SELECT redis_stock_get('$item')", $initial - $committed, 'as redis_stock_get says');
my $ops = $cluster->node($to)->sibling('m:', 'ops', $item);
ok(!defined $ops || defined wait_until(10, sub { !$cluster->command($to, 'EXISTS', $ops) }),
	'no decrement record is left')
  or diag explain $cluster->command($to, 'HGETALL', $ops);
is( join(' ', sort map { @{ $_ } } $cluster->command($to, 'SMEMBERS', $cluster->node($to)->sibling('m:', 'buyers', $item))),
	'b1 b2 b4 carol', 'the buyers are those of the committed sales');
diag sprintf 'whole test took %d s', time - $t0;

$_->quit foreach ($sa, $sb, $sc, $sd);
$node->stop;

done_testing();
