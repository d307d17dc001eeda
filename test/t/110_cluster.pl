# Redis Cluster servers (option "cluster"), on one cluster of 3 masters and
# 3 replicas that wants a password:
# - the option is validated at CREATE and ALTER SERVER: it excludes host,
#   port and unix_socket, allows database 0 only, and refuses a malformed
#   list of seed nodes;
# - locks and stock work on keys of all three masters, reached from one
#   seed (or from a list whose first seed is dead), with and without hash
#   tags in the key and in the key prefix; each key, and what is kept
#   beside it, is on the master serving its slot, and nowhere else;
# - a transaction with locks on three masters releases them all at commit,
#   a rollback gives back decrements made on three masters, and a savepoint
#   rollback undoes only what was done inside it;
# - two sessions contend for one key: the second one gets false, or waits
#   and gets it at the first one's commit;
# - redis_stock_recover() finds the decrements of a SIGKILLed backend on
#   every master and gives them back;
# - redis_server_nodes() shows the three masters, their slots covering
#   0-16383 once, connected;
# - min_replicas waits for the replica of the key's master, and a lock that
#   too few replicas acknowledge is an error (55000) and is not left;
# - the user mapping's ACL user and password are used on every node; no
#   mapping, or a wrong password, is refused.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisCluster;
use RedisClusterTest qw(new_cluster_node session works user_key_on);
use RedisLockTest qw(session_query start_query finish_query wait_until key_slot crash_restart);

my $t0 = time;
my $cluster = RedisCluster->start_cluster(
	masters      => 3,
	replicas     => 1,
	node_timeout => 1000,
	password     => 'pw');
diag sprintf 'cluster of 6 nodes up in %d s', time - $t0;
my @masters = $cluster->masters;
my ($m1, $m2, $m3) = @masters;

# A Redis ACL user on every node (ACLs are per node, not replicated).
foreach my $port ($cluster->all_ports)
{
	$cluster->command_ok($port, 'ACL', 'SETUSER', 'app', 'on', '>apppw', '~*', '+@all');
}

# Server rc is reached from one seed; rt through a dead seed and a replica.
my $dead_port = PostgreSQL::Test::Cluster::get_free_port();
my ($replica1) = $cluster->replicas_of($m1);
my $node = new_cluster_node(
	'cluster', $cluster,
	seeds      => "127.0.0.1:$m1",
	key_prefix => 'shop:',
	# The test framework turns crash restarts off; the recover case needs them.
	conf => 'restart_after_crash = on',
	sql  => qq{
	ALTER SERVER redislock OPTIONS (SET port '$m1');
	CREATE USER MAPPING FOR PUBLIC SERVER redislock OPTIONS (password 'pw');
	CREATE USER MAPPING FOR PUBLIC SERVER rc
		OPTIONS (username 'app', password 'apppw');
	CREATE SERVER rt FOREIGN DATA WRAPPER redislock
		OPTIONS (cluster '127.0.0.1:$dead_port, 127.0.0.1:$replica1',
		         key_prefix '{tenant}:');
	CREATE USER MAPPING FOR PUBLIC SERVER rt
		OPTIONS (username 'app', password 'apppw');
	CREATE SERVER nomap FOREIGN DATA WRAPPER redislock
		OPTIONS (cluster '${\$cluster->seeds}');
	CREATE SERVER badpw FOREIGN DATA WRAPPER redislock
		OPTIONS (cluster '${\$cluster->seeds}');
	CREATE USER MAPPING FOR PUBLIC SERVER badpw OPTIONS (password 'wrong');
	GRANT USAGE ON FOREIGN SERVER redislock, rt, nomap, badpw TO PUBLIC;
});

my $s = session($node);
my ($out, $err);

# --- the option is validated
# Check that CREATE SERVER with $options is refused with an FDW error.
sub refused
{
	my ($options, $name) = @_;
	($out, $err) = session_query($s,
		"CREATE SERVER bad FOREIGN DATA WRAPPER redislock OPTIONS ($options)");
	like($err, qr/ERROR:\s+HV\w{3}: /, "refused: $name");
	session_query($s, 'DROP SERVER IF EXISTS bad');
	return;
}
refused("cluster '127.0.0.1:$m1', host '127.0.0.1'", 'cluster with host');
refused("cluster '127.0.0.1:$m1', port '$m1'", 'cluster with port');
refused("cluster '127.0.0.1:$m1', unix_socket '/tmp/redis.sock'", 'cluster with unix_socket');
refused("cluster '127.0.0.1:$m1', database '1'", 'cluster with database 1');
foreach my $list ('', ' ', 'localhost', '127.0.0.1:', ':7001', '127.0.0.1:0',
	'127.0.0.1:65536', '127.0.0.1:70a1', "127.0.0.1:$m1,,127.0.0.1:$m2")
{
	refused("cluster '$list'", "malformed cluster list '$list'");
}
works($s,
	"CREATE SERVER db0 FOREIGN DATA WRAPPER redislock"
	  . " OPTIONS (cluster '127.0.0.1:$m1, 127.0.0.1:$m2', database '0'); DROP SERVER db0",
	'', "cluster with database '0' is accepted");
foreach my $alter ("ADD host '127.0.0.1'", "ADD database '2'", "SET cluster '127.0.0.1'")
{
	($out, $err) = session_query($s, "ALTER SERVER rc OPTIONS ($alter)");
	like($err, qr/ERROR:\s+HV\w{3}: /, "ALTER SERVER rc OPTIONS ($alter) is refused");
}
($out, $err) = session_query($s, "ALTER SERVER redislock OPTIONS (ADD cluster '127.0.0.1:$m1')");
like($err, qr/ERROR:\s+HV\w{3}: /, 'a server with host and port cannot be given cluster');
($out, $err) = session_query($s,
	"CREATE USER MAPPING FOR CURRENT_USER SERVER nomap OPTIONS (cluster '127.0.0.1:$m1')");
like($err, qr/ERROR:\s+HV00D: /, 'cluster is not a user mapping option');
($out) = session_query($s, q{SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'rc'});
is($out, "{cluster=127.0.0.1:$m1,key_prefix=shop:}", 'server rc keeps its options');

# --- locks and stock on every master, with and without hash tags
# Take a session lock on $key and put stock on it, through the current
# server, whose prefix is $prefix; check that the master on $port holds
# them, and what is kept beside them in their slot.
sub lock_and_stock
{
	my ($port, $prefix, $key) = @_;
	my $full = $prefix . $key;
	my $what = "'$key' on port $port";

	works($s, "SELECT redis_lock_acquire_session('$key', 60000), redis_lock_fence('$key') > 0",
		't|t', "$what: lock taken, with a fencing token");
	like($cluster->command($port, 'GET', $full) // 'nil', qr/^pg:/,
		"$what: the master serving the slot holds the lock");
	my $fence = $cluster->node($port)->sibling($prefix, 'fence', $key);
	ok(defined $fence && key_slot($fence) == key_slot($full),
		"$what: the fencing token is beside it, in its slot");
	works($s, "SELECT redis_lock_extend('$key', 60000)", 't', "$what: lock extended");
	works($s, "SELECT redis_lock_release('$key')", 't', "$what: lock released");
	is($cluster->command($port, 'EXISTS', $full), '0', "$what: the lock key is gone");

	works($s, "SELECT redis_stock_set('$key', 10); SELECT redis_stock_get('$key')",
		"\n10", "$what: stock set");
	is($cluster->command($port, 'GET', $full), '10', "$what: the master holds the stock");
	works($s, "SELECT redis_stock_decr('$key', 2, 'alice')", '8', "$what: decrement with a buyer");
	works($s, "SELECT redis_stock_decr('$key', 1, 'alice')", '-2', "$what: a buyer buys once");
	works($s, "SELECT redis_stock_incr('$key', 2)", '10', "$what: stock incr");
	my $buyers = $cluster->node($port)->sibling($prefix, 'buyers', $key);
	ok(defined $buyers && key_slot($buyers) == key_slot($full),
		"$what: its buyers are beside it, in its slot");
	ok(defined wait_until(10, sub { !defined $cluster->node($port)->sibling($prefix, 'ops', $key) }),
		"$what: the committed decrement's record is cleared");
	works($s, "SELECT redis_stock_delete('$key')", 't', "$what: stock deleted");
	is( join(' ',
			grep { /\A\Q$prefix\E(?:\{[0-9]+\}:(?:buyers|ops):)?\Q$key\E\z/ }
			  $cluster->node($port)->keys),
		'', "$what: nothing of the item is left");
	return;
}

my %plain = map { $_ => user_key_on($cluster, $_, 'shop:', 'k') } @masters;
my %tagged = map { $_ => user_key_on($cluster, $_, 'shop:', sub { "{u$_[0]}:k" }) } @masters;
foreach my $port (@masters)
{
	lock_and_stock($port, 'shop:', $plain{$port});
	lock_and_stock($port, 'shop:', $tagged{$port});
}

# A prefix with a hash tag puts every key in the slot of its tag, whatever
# tag the key has; this server was reached through a dead seed and a replica.
session_query($s, 'SET redislock.server = rt');
my $tenant = $cluster->master_for_key('{tenant}');
lock_and_stock($tenant, '{tenant}:', $_) foreach ('plain', '{x}y');
session_query($s, 'RESET redislock.server');

# --- a transaction on three masters
my @locks = map { $plain{$_} } @masters;
my @items = map { $tagged{$_} } @masters;
my $list = join ', ', map { "'$_'" } @locks;
works($s,
	"BEGIN; SELECT count(*) FILTER (WHERE redis_lock_acquire(k, 60000)) FROM unnest(ARRAY[$list]) k;"
	  . " SELECT count(*) FROM redis_locks() WHERE scope = 'transaction'",
	"3\n3", 'a transaction takes a lock on each master');
my @tokens = map { $cluster->command($masters[$_], 'GET', "shop:$locks[$_]") // 'nil' } 0 .. 2;
ok((grep { /^pg:/ && $_ eq $tokens[0] } @tokens) == 3,
	'each master holds its lock, with the backend\'s token');
works($s, 'COMMIT', '', 'the transaction commits');
is(join(' ', map { $cluster->command($masters[$_], 'EXISTS', "shop:$locks[$_]") } 0 .. 2),
	'0 0 0', 'all three locks are released');

works($s, join('; ', map { "SELECT redis_stock_set('$_', 10)" } @items), "\n\n", 'stock on each master');
works($s, 'BEGIN; ' . join('; ', map { "SELECT redis_stock_decr('$_', 2, 'bob')" } @items),
	"8\n8\n8", 'a transaction decrements on each master');
is(join(' ', map { $cluster->command($masters[$_], 'GET', "shop:$items[$_]") } 0 .. 2),
	'8 8 8', 'the masters hold the decrements');
works($s, 'ROLLBACK', '', 'the transaction rolls back');
is(join(' ', map { $cluster->command($masters[$_], 'GET', "shop:$items[$_]") } 0 .. 2),
	'10 10 10', 'the units are back on all three masters');
works($s, join('; ', map { "SELECT redis_stock_decr('$_', 1, 'bob')" } @items),
	"9\n9\n9", 'and the buyer may buy on each');
works($s, join('; ', map { "SELECT redis_stock_get('$_')" } @items),
	"9\n9\n9", 'the session reads each stock: its next command on each master');
ok( defined wait_until(
		10,
		sub {
			!grep { defined $cluster->node($masters[$_])->sibling('shop:', 'ops', $items[$_]) } 0 .. 2;
		}),
	'which carried the clears: no decrement record is left on any master');

# A savepoint rollback undoes what was done inside it, on its masters only.
works($s,
	"BEGIN; SELECT redis_lock_acquire('$locks[0]', 60000); SAVEPOINT sp;"
	  . " SELECT redis_lock_acquire('$locks[1]', 60000); SELECT redis_stock_decr('$items[2]', 4)",
	"t\nt\n5", 'a lock before a savepoint, a lock and a decrement after it');
works($s, 'ROLLBACK TO sp', '', 'rollback to the savepoint');
is( join(' ',
		$cluster->command($m1, 'EXISTS', "shop:$locks[0]"),
		$cluster->command($m2, 'EXISTS', "shop:$locks[1]"),
		$cluster->command($m3, 'GET',    "shop:$items[2]")),
	'1 0 9',
	'the lock taken inside is released and the units are back; the one before is held');
works($s, 'COMMIT', '', 'commit');
is($cluster->command($m1, 'EXISTS', "shop:$locks[0]"), '0', 'the lock before the savepoint is released');

# --- contention between two sessions
my $s2 = session($node);
my ($pid2) = session_query($s2, 'SELECT pg_backend_pid()');
my $hot = $plain{$m2};
works($s, "BEGIN; SELECT redis_lock_acquire('$hot', 60000)", 't', 'session 1 locks a key on a master');
my $token1 = $cluster->command($m2, 'GET', "shop:$hot");
($out, $err) = session_query($s2, "SELECT redis_lock_acquire('$hot', 60000)");
is("$out$err", 'f', 'session 2 does not get it');
($out, $err) = session_query($s2, "SELECT redis_lock_acquire('$plain{$m3}', 60000)");
is("$out$err", 't', 'but gets a key on another master');
start_query($s2, "BEGIN; SELECT redis_lock_acquire('$hot', 60000, 20000)");
ok( defined wait_until(
		10,
		sub {
			$node->safe_psql('postgres',
				"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $pid2") eq 'Extension';
		}),
	'session 2 waits for the key');
works($s, 'COMMIT', '', 'session 1 commits');
($out, $err) = finish_query($s2, 30);
is("$out$err", 't', 'session 2 gets the key');
my $token2 = $cluster->command($m2, 'GET', "shop:$hot") // 'nil';
ok($token2 =~ /^pg:/ && $token2 ne $token1, 'the key holds session 2\'s token');
($out, $err) = session_query($s2, 'COMMIT');
is($cluster->command($m2, 'EXISTS', "shop:$hot"), '0', 'and is released at its commit');

# --- redis_server_nodes()
my %slots_of = map { $_->{port} => join(',', @{ $_->{slots} }) } $cluster->nodes;
($out, $err) = session_query($s,
	"SELECT endpoint, slots, connected FROM redis_server_nodes('rc') WHERE role = 'master' ORDER BY endpoint");
is( "$out$err",
	join("\n", map { "127.0.0.1:$_|$slots_of{$_}|t" } sort @masters),
	'redis_server_nodes: the three masters, their slots, connected');
my %count;
foreach my $range (split /,/, join ',', map { (split /\|/)[1] } split /\n/, $out)
{
	my ($lo, $hi) = split /-/, $range;
	$count{$_}++ for $lo .. ($hi // $lo);
}
ok(keys %count == 16384 && !(grep { $_ != 1 } values %count)
	  && !(grep { $_ < 0 || $_ > 16383 } keys %count),
	'their slots cover 0-16383, each once');
my $replica_list = join '|', map { "127\\.0\\.0\\.1:$_" } map { $cluster->replicas_of($_) } @masters;
($out, $err) = session_query($s,
	"SELECT endpoint FROM redis_server_nodes('rc') WHERE role <> 'master' ORDER BY endpoint");
ok($err eq '' && !(grep { !/^(?:$replica_list)$/ } split /\n/, $out),
	'any other row is one of the replicas');
($out, $err) = session_query($s,
	q{SELECT (SELECT array_agg(n ORDER BY n::text) FROM redis_server_nodes() n)
	       = (SELECT array_agg(n ORDER BY n::text) FROM redis_server_nodes('rc') n)});
is("$out$err", 't', 'redis_server_nodes() shows the current server');
($out, $err) = session_query($s,
	q{SELECT endpoint, role FROM redis_server_nodes('redislock')});
is("$out$err", "127.0.0.1:$m1|master", 'a single server is one row');

# --- min_replicas on a cluster: WAIT goes to the master of the key's slot
$node->safe_psql('postgres', "ALTER SERVER rc OPTIONS (ADD min_replicas '1', ADD replica_timeout '500')");
my ($replica1) = $cluster->replicas_of($m1);
my $mr = user_key_on($cluster, $m1, 'shop:', 'mr');
works($s, "SELECT redis_lock_acquire_session('$mr', 60000)", 't',
	'min_replicas 1: a lock on a master with a replica');
ok((grep { $_ eq "shop:$mr" } $cluster->node($replica1)->keys("shop:$mr")),
	'its replica has the lock when the call returns');
works($s, "SELECT redis_lock_release('$mr')", 't', 'and it is released');
$node->safe_psql('postgres', "ALTER SERVER rc OPTIONS (SET min_replicas '2')");
($out, $err) = session_query($s, "SELECT redis_lock_acquire('$mr', 60000)");
like($err, qr/ERROR:\s+55000: .*1 of 2 required replicas/,
	'min_replicas 2 with one replica per master: 55000, one of two acknowledged');
is($cluster->command($m1, 'EXISTS', "shop:$mr"), '0', 'and the lock is not left on the master');
$node->safe_psql('postgres', 'ALTER SERVER rc OPTIONS (DROP min_replicas, DROP replica_timeout)');

# --- credentials on every node
like($cluster->command($_, 'CLIENT', 'LIST'), qr/\buser=app\b/, "port $_: the session is user \"app\"")
  foreach @masters;
foreach my $case ([ 'nomap', '28000', 'no user mapping' ], [ 'badpw', '28P01', 'a wrong password' ])
{
	my ($server, $state, $what) = @$case;
	session_query($s, "SET redislock.server = $server");
	($out, $err) = session_query($s, "SELECT redis_lock_acquire('$plain{$m1}', 60000)");
	like($err, qr/ERROR:\s+$state: /, "$what: $state");
	session_query($s, 'RESET redislock.server');
}
works($s, "SELECT redis_stock_get('$items[0]')", '9', 'the session goes on with its own server');

# --- redis_stock_recover() after a SIGKILLed backend
my $sk = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
($out, $err) = session_query($sk,
	'BEGIN; ' . join('; ', map { "SELECT redis_stock_decr('$_', 3, 'carol')" } @items)
	  . '; SELECT pg_current_xact_id(), pg_backend_pid()');
my ($xid, $pid) = split /\|/, (split /\n/, $out)[3];
is("$err" . join(' ', (split /\n/, $out)[ 0 .. 2 ]), '6 6 6',
	'a backend decrements on each master in an open transaction');
ok(crash_restart($node, $pid), 'the server restarted after the crash');
$_->quit foreach ($s, $s2, $sk);
is(join(' ', map { $cluster->command($masters[$_], 'GET', "shop:$items[$_]") } 0 .. 2),
	'6 6 6', 'nothing gave the units back');
is( $node->safe_psql('postgres',
		'SELECT key, xid, qty, buyer, outcome FROM redis_stock_recover() ORDER BY key COLLATE "C"'),
	join("\n", map { "$_|$xid|3|carol|aborted" } sort @items),
	'recover finds the decrement on each master, aborted');
is(join(' ', map { $cluster->command($masters[$_], 'GET', "shop:$items[$_]") } 0 .. 2),
	'9 9 9', 'and gives the units back on each master');
is( $node->safe_psql('postgres',
		join('; ', map { "SELECT redis_stock_decr('$_', 1, 'carol')" } @items)),
	"8\n8\n8", 'and the buyer may buy again');
is($node->safe_psql('postgres', 'SELECT count(*) FROM redis_stock_recover()'),
	'0', 'a second recover finds nothing');
diag sprintf 'whole test took %d s', time - $t0;

$node->stop;

done_testing();
