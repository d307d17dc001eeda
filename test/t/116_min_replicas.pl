# Replica acknowledgement (server options min_replicas and replica_timeout)
# on a master with one replica watched by a Sentinel, used through a
# Sentinel server and through a single server naming the master, and on a
# Redis without replicas.
# - min_replicas below 0 and replica_timeout below 1 are refused, and both
#   are server options only.
# - With the replica up, an acquire and a decrement return once the replica
#   has them: right after the call the replica holds the lock, the stock
#   and the decrement record, and a paused replica holds the call until it
#   resumes.
# - With the replica stopped, or with more replicas required than there
#   are, they fail with 55000 naming the server and how many replicas
#   acknowledged, and leave nothing in Redis: no lock, no fencing token, the
#   stock whole, no decrement record, no buyer, the same number of keys.
# - Once the replica is back, they work again.
# - A server that refuses WAIT (here an ACL user without it) fails the call
#   with 0A000 saying so, and leaves no lock.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval);
use RedisSentinel;
use RedisLockTest qw(session_query start_query finish_query wait_until sleep_for);

my $group = RedisSentinel->start_sentinel_group(replicas => 1, sentinels => 1);
my $sentinels = $group->sentinels;
my $mname = $group->master_name;
my $master = $group->master_port;
my ($replica) = $group->replica_ports;
my $lone = RedisLockTest->start_redis();
my $lone_port = $lone->port;

my $node = RedisLockTest->new_node('replicas', $lone);
$node->safe_psql(
	'postgres', qq{
	CREATE SERVER via_sentinel FOREIGN DATA WRAPPER redislock
		OPTIONS (sentinel '$sentinels', sentinel_master '$mname', min_replicas '1');
	CREATE SERVER direct FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$master', min_replicas '1', replica_timeout '100');
	CREATE SERVER patient FOREIGN DATA WRAPPER redislock
		OPTIONS (sentinel '$sentinels', sentinel_master '$mname', min_replicas '1',
		         replica_timeout '5000');
	CREATE SERVER lone FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$lone_port', min_replicas '1');
	GRANT USAGE ON FOREIGN SERVER via_sentinel, direct, patient, lone TO PUBLIC;
});

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
my ($pid) = session_query($s, 'SELECT pg_backend_pid()');
my ($out, $err);

my $m = $group->node($master);
my $r = $group->node($replica);
my $token = qr/\Apg:.*:$pid:[0-9]+:[0-9a-f]{32}\z/;
# Each server's keys start with a letter of their own, not with the
# server's name, so that an error naming the key does not name the server.
my %k = (via_sentinel => 's', direct => 'd', lone => 'l');

# --- options
foreach my $case ([ 'min_replicas', '-1' ], [ 'min_replicas', 'x' ],
	[ 'replica_timeout', '0' ], [ 'replica_timeout', '-5' ])
{
	my ($opt, $value) = @$case;
	($out, $err) = session_query($s,
		"CREATE SERVER bad FOREIGN DATA WRAPPER redislock OPTIONS ($opt '$value')");
	like($err, qr/ERROR:\s+\w{5}: [^\n]*$opt/, "$opt '$value' refused");
}
($out, $err) = session_query($s,
	"ALTER SERVER direct OPTIONS (SET min_replicas '-1')");
like($err, qr/ERROR:\s+\w{5}: [^\n]*min_replicas/, 'also by ALTER SERVER');
($out, $err) = session_query($s,
	"CREATE USER MAPPING FOR PUBLIC SERVER direct OPTIONS (min_replicas '1')");
like($err, qr/ERROR:\s+\w{5}: invalid option "min_replicas"/,
	'min_replicas is no user mapping option');
($out, $err) = session_query($s,
	"CREATE SERVER good FOREIGN DATA WRAPPER redislock "
	  . "OPTIONS (min_replicas '0', replica_timeout '1'); DROP SERVER good");
is($err, '', "min_replicas '0' and replica_timeout '1' are accepted");

# --- the replica up: calls return once it has what they did
foreach my $srv ('via_sentinel', 'direct')
{
	session_query($s, "SET redislock.server = $srv");
	session_query($s, 'BEGIN');
	($out, $err) = session_query($s, "SELECT redis_lock_acquire('$k{$srv}:lock', 30000)");
	is("$out$err", 't', "$srv: the lock is taken");
	like($r->command('GET', "$k{$srv}:lock") // 'nil', $token, "$srv: the replica has it at once");
	ok(defined $r->sibling('', 'fence', "$k{$srv}:lock"), "$srv: and its fencing token");
	($out, $err) = session_query($s,
		"SELECT redis_stock_set('$k{$srv}:item', 10); "
		  . "SELECT redis_stock_decr('$k{$srv}:item', 2, 'alice')");
	is("$out$err", "\n8", "$srv: two units are taken");
	is($r->command('GET', "$k{$srv}:item"), '8', "$srv: the replica has the stock at once");
	ok(defined $r->sibling('', 'ops', "$k{$srv}:item"), "$srv: and the decrement record");
	($out, $err) = session_query($s, 'COMMIT');
	is($err, '', "$srv: COMMIT succeeds");
	is($m->command('EXISTS', "$k{$srv}:lock"), 0, "$srv: and releases the lock");
}

# A paused replica holds an acquire and a decrement until it resumes.
session_query($s, 'SET redislock.server = patient; SET redislock.command_timeout = 10000');
foreach my $case ([ "redis_lock_acquire_session('p:lock', 30000)", 't' ],
	[ "redis_stock_decr('d:item', 1)", '7' ])
{
	my ($call, $expected) = @$case;
	$group->pause_node($replica);
	my $t0 = [gettimeofday];
	start_query($s, "SELECT $call");
	sleep_for(1);
	$group->resume_node($replica);
	($out, $err) = finish_query($s, 20);
	my $secs = tv_interval($t0);
	is("$out$err", $expected, "$call succeeds once the paused replica resumes");
	cmp_ok($secs, '>=', 1.0, sprintf('%s waited for it (%.1f s)', $call, $secs));
}
is($r->command('GET', 'd:item'), '7', 'the replica has the decrement');
like($r->command('GET', 'p:lock') // 'nil', $token, 'and the lock');
($out, $err) = session_query($s,
	"SELECT redis_lock_release('p:lock'); RESET redislock.command_timeout");
is("$out$err", 't', 'which is released');

# --- the replica stopped: refused, nothing left behind
is(scalar($group->stop_all_replicas), 1, 'the replica is stopped');

# Run each call that needs a replica on server $srv, whose Redis is $redis:
# each must fail with 55000, naming the server (or its endpoint) and saying
# that $acked of $required replicas acknowledged, and leave nothing in
# Redis.  Stock $item holds $units.
sub nothing_without_replicas
{
	my ($srv, $redis, $acked, $required, $item, $units) = @_;
	my $port = $redis->port;
	my $keys = $redis->command('DBSIZE');
	my $lock = "$k{$srv}:none";
	session_query($s, "SET redislock.server = $srv");

	foreach my $case (
		[ "redis_lock_acquire('$lock', 30000)",         1, 'a transaction lock' ],
		[ "redis_lock_acquire_session('$lock', 30000)", 0, 'a session lock' ],
		[ "redis_stock_decr('$item', 1, 'bob')",        1, 'a decrement by a buyer' ],
		[ "redis_stock_decr('$item', 1)",               0, 'a decrement outside a transaction' ])
	{
		my ($call, $in_xact, $which) = @$case;
		my $what = "$srv, $acked of $required, $which";
		($out, $err) = session_query($s,
			$in_xact ? "BEGIN; SELECT $call; ROLLBACK" : "SELECT $call");
		like($err, qr/ERROR:\s+55000: /, "$what: ERROR 55000");
		like($err, qr/\b$acked of $required\b[^\n]*acknowledg/,
			"$what: $acked of $required replicas acknowledged");
		like($err, qr/\b\Q$srv\E\b|127\.0\.0\.1:$port\b/, "$what: names the server");
	}

	my $what = "$srv, $acked of $required";
	($out, $err) = session_query($s, 'SELECT count(*) FROM redis_locks()');
	is("$out$err", '0', "$what: the backend holds no lock");
	is($redis->command('EXISTS', $lock), 0, "$what: Redis holds no lock");
	is($redis->sibling('', 'fence', $lock), undef, "$what: nor its fencing token");
	($out, $err) = session_query($s, "SELECT redis_stock_get('$item')");
	is("$out$err", $units, "$what: the stock is whole");
	is($redis->command('GET', $item), $units, "$what: in Redis too");
	is($redis->sibling('', 'ops', $item), undef, "$what: no decrement record is left");
	my $buyers = $redis->sibling('', 'buyers', $item);
	is(defined $buyers ? $redis->command('SISMEMBER', $buyers, 'bob') : 0,
		0, "$what: bob did not become a buyer");
	is($redis->command('DBSIZE'), $keys, "$what: Redis holds as many keys as before");
	return;
}

nothing_without_replicas('via_sentinel', $m, 0, 1, 's:item', '8');
nothing_without_replicas('direct', $m, 0, 1, 'd:item', '7');

# --- the replica back
$group->start_replicas;
foreach my $srv ('via_sentinel', 'direct')
{
	session_query($s, "SET redislock.server = $srv");
	($out, $err) = session_query($s,
		"SELECT redis_lock_acquire_session('$k{$srv}:back', 30000); "
		  . "SELECT redis_stock_decr('$k{$srv}:item', 1)");
	my $left = $srv eq 'direct' ? 6 : 7;
	is("$out$err", "t\n$left", "$srv: with the replica back, lock and decrement work again");
	like($r->command('GET', "$k{$srv}:back") // 'nil', $token, "$srv: the replica has the lock");
	is($r->command('GET', "$k{$srv}:item"), $left, "$srv: and the stock");
	($out, $err) = session_query($s, "SELECT redis_lock_release('$k{$srv}:back')");
	is("$out$err", 't', "$srv: the lock is released");
}

# --- more replicas required than there are: one acknowledges, not enough
session_query($s, "ALTER SERVER direct OPTIONS (SET min_replicas '2')");
nothing_without_replicas('direct', $m, 1, 2, 'd:item', '6');
ok( defined wait_until(
		10,
		sub {
			$r->command('EXISTS', 'd:none') == 0
			  && $r->command('GET', 'd:item') eq '6';
		}),
	'the replica, which acknowledged, has the lock removed and the stock whole too');

# --- a Redis without replicas
$lone->command('SET', 'l:item', 5);
nothing_without_replicas('lone', $lone, 0, 1, 'l:item', '5');

# --- a server that refuses WAIT (as some managed services do): an ACL user
# without it stands for one
$lone->command('ACL', 'SETUSER', 'nowait', 'on', '>nw', '~*', '+@all', '-wait');
$node->safe_psql('postgres',
	"CREATE USER MAPPING FOR CURRENT_USER SERVER lone OPTIONS (username 'nowait', password 'nw')");
session_query($s, 'SET redislock.server = lone');
($out, $err) = session_query($s, "SELECT redis_lock_acquire('l:w', 60000)");
like($err, qr/ERROR:\s+0A000: Redis server "lone" refused WAIT, which option "min_replicas" needs\nDETAIL:  Redis at \S+ answered: NOPERM/,
	'a server refusing WAIT: 0A000 that says so');
is($lone->command('EXISTS', 'l:w'), '0', 'and the lock is not left');
session_query($s, 'RESET redislock.server');

$s->quit;
$node->stop;

done_testing();
