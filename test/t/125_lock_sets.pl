# Sets of Redis locks (redis_lock_acquire_all and _session): every key of
# the set, or none.  One PostgreSQL node, with servers on a single Redis, a
# Redis Cluster of 3 masters without replicas, 3 Redlock masters and a
# master under one Sentinel.
# - Single Redis, without the preload and then with redislock in
#   shared_preload_libraries: two sessions each run 100 transactions, one
#   taking {x,y,z}, the other {z,y,x}, waiting without limit and up to 20 s;
#   both loops end (no deadlock), every round gets the set, nobody else is
#   in the critical section (a session advisory lock taken and given back
#   inside it) and each round holds the 3 keys in its transaction; nothing
#   is left in Redis afterwards.  Meanwhile a third session holds y for
#   about a second: the loops wait, no round ends, and x and z stay free in
#   Redis all that time (a waiter holds none of its set); with the preload,
#   redis_locks() shows no key of the set granted to a waiter.
# - Single Redis, one call each way: a set of 3 keys is taken by one EVALSHA
#   and released by one more; with its second key held by a foreign client
#   a set is refused in one EVALSHA that writes nothing (no lock, no
#   fencing token drawn for its first key) and needs no release after it;
#   redis_lock_release_all() of a set whose 3 keys each have a waiter
#   hands each key to its waiter (3 hand-offs written).
# - Cluster: three keys served by three different masters are taken in one
#   call, each on its own master with the backend's one token, and COMMIT
#   clears all three; with one of them held by a foreign client the call
#   returns false and leaves none of ours on any master, and no waiter
#   holds the others while it waits; with wait_ms 5000 and the foreign key
#   deleted after ~300 ms it returns true.  A session set ends with
#   redis_lock_release_all().  Three keys of one slot are taken in one
#   EVALSHA on its master, and released each by one of its own (a release
#   must run while a slot migrates).
# - Redlock: three keys, each on every master with one token, released on
#   all of them at commit; a key held by a foreign client on 2 of the 3
#   masters makes the call false and none of our tokens is left on any
#   master for any key of the set; waiting, it gets the set once one of the
#   two lets go; with one master killed the set is still granted, by the
#   other two; with two killed, a session set is an ERROR of class 08 and
#   the master that answered is left with none of it.
# - Sentinel: a set of two keys taken through the Sentinel is on the
#   master, with the backend's token, and gone at commit.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);
use RedisCluster;
use RedisClusterTest qw(user_key_on);
use RedisMasters;
use RedisSentinel;
use RedlockTest qw(values_on);
use RedisLockTest qw(add_server session session_query start_query finish_query works wait_until);

my $t0 = time;
my $rounds = 100;
my ($out, $err);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('lock_sets', $redis);
$node->safe_psql('postgres',
	'CREATE TABLE rounds (who text, round int, got bool, alone bool, held int)');

# A DO block running $rounds transactions, each taking the set $keys
# (an array literal) waiting up to $wait ms, then checking that it is alone
# in the critical section with a session advisory lock, given back before
# the COMMIT; each round is a row of table rounds.
sub set_loop
{
	my ($who, $keys, $wait) = @_;
	return qq{DO \$\$
DECLARE
	got bool;
	alone bool;
	held int;
BEGIN
	FOR i IN 1 .. $rounds LOOP
		got := redis_lock_acquire_all('$keys', 30000, $wait);
		alone := pg_try_advisory_lock(1);
		SELECT count(*) INTO held FROM redis_locks()
			WHERE pid = pg_backend_pid() AND scope = 'transaction' AND granted;
		PERFORM pg_sleep(0.005);
		IF alone THEN
			PERFORM pg_advisory_unlock(1);
		END IF;
		INSERT INTO rounds VALUES ('$who', i, got, alone, held);
		COMMIT;
	END LOOP;
END \$\$};
}

# The backend pid of a session
sub pid_of
{
	my ($session) = @_;
	return (session_query($session, 'SELECT pg_backend_pid()'))[0];
}

# Whether every backend of @pids waits on the extension, within $limit s
sub all_wait
{
	my ($mon, $limit, @pids) = @_;
	return defined wait_until(
		$limit,
		sub {
			my ($n) = session_query($mon,
				'SELECT count(*) FROM pg_stat_activity WHERE pid IN (' . join(', ', @pids)
				  . ") AND wait_event_type = 'Extension'");
			$n == @pids;
		});
}

# Rounds done so far by each loop, as "a b"
sub done_rounds
{
	my ($mon) = @_;
	my ($n) = session_query($mon,
		"SELECT count(*) FILTER (WHERE who = 'a') || ' ' || count(*) FILTER (WHERE who = 'b') FROM rounds");
	return $n;
}

# Two loops over opposite orders of {x,y,z}, with a third session holding y
# for about a second in the middle of them.
sub contend
{
	my ($what, $preloaded) = @_;
	my ($sa, $sb, $third, $mon) = map { session($node) } 1 .. 4;
	my @loop_pids = map { pid_of($_) } ($sa, $sb);
	my $third_pid = pid_of($third);

	session_query($mon, 'TRUNCATE rounds');
	start_query($sa, set_loop('a', '{x,y,z}', -1));
	start_query($sb, set_loop('b', '{z,y,x}', 20000));
	ok( defined wait_until(
			60,
			sub {
				my ($na, $nb) = split / /, done_rounds($mon);
				$na + $nb >= 10;
			}),
		"$what: the loops are under way");

	my ($got, $err3) = session_query($third, "BEGIN; SELECT redis_lock_acquire('y', 30000, 20000)");
	is("$got$err3", 't', "$what: a third session takes y among them");
	my $token = $redis->command('GET', 'y') // 'nil';
	my ($na, $nb) = split / /, done_rounds($mon);
	ok($na < $rounds && $nb < $rounds, "$what: neither loop has ended yet ($na and $nb rounds)");
	ok(all_wait($mon, 10, @loop_pids), "$what: both loops wait");
	# let a waiter woken for another key on its way settle on y
	usleep(300_000);
	my $before = done_rounds($mon);
	my ($busy, $samples, $not_third) = (0, 0, 0);
	if ($preloaded)
	{
		($out, $err) = session_query($mon,
			'SELECT count(*) FILTER (WHERE granted AND pid IN (' . join(', ', @loop_pids) . ')),'
			  . " count(*) FILTER (WHERE granted AND pid = $third_pid AND key = 'y')"
			  . ' FROM redis_locks()');
		is("$out$err", '0|1',
			"$what: redis_locks() shows no key granted to the waiters, y granted to the third session");
	}
	for (1 .. 10)
	{
		$samples++;
		$busy++ if $redis->command('EXISTS', 'x', 'z') ne '0';
		$not_third++ if ($redis->command('GET', 'y') // 'nil') ne $token;
		usleep(80_000);
	}
	is($busy, 0, "$what: x and z are free in Redis while the loops wait ($samples samples)");
	is($not_third, 0, "$what: y keeps the third session's token ($token)");
	ok(all_wait($mon, 1, @loop_pids), "$what: and the loops still wait");
	is(done_rounds($mon), $before, "$what: no round ended while y was held");
	works($third, 'COMMIT', '', "$what: the third session commits");

	foreach my $loop ([ 'a', $sa ], [ 'b', $sb ])
	{
		my ($who, $session) = @$loop;
		my ($lout, $lerr) = eval { finish_query($session, 120) };
		is($lerr // "did not finish: $@", '', "$what: loop $who ends without an error");
	}
	($out, $err) = session_query($mon,
		"SELECT who, count(*), count(*) FILTER (WHERE got), count(*) FILTER (WHERE got AND alone),"
		  . " count(*) FILTER (WHERE held = 3) FROM rounds GROUP BY who ORDER BY who");
	is("$out$err", "a|$rounds|$rounds|$rounds|$rounds\nb|$rounds|$rounds|$rounds|$rounds",
		"$what: each loop got its set $rounds times, alone in the critical section, holding 3 keys");
	is($redis->command('EXISTS', 'x', 'y', 'z'), '0', "$what: no key of the set is left in Redis");
	$_->quit foreach ($sa, $sb, $third, $mon);
	return;
}

# One counter of INFO commandstats of a Redis node ($port of $cluster, or
# the single Redis), e.g. cmdstat('evalsha', 'calls')
sub cmdstat
{
	my ($command, $field, $cluster, $port) = @_;
	my $info =
	  defined $cluster
	  ? $cluster->command($port, 'INFO', 'commandstats')
	  : $redis->cli('INFO', 'commandstats');
	return $info =~ /^cmdstat_\Q$command\E:.*\b$field=(\d+)/m ? $1 : 0;
}

# A Redis call that a statement of $session makes, counted by cmdstat()
sub calls_of
{
	my ($session, $sql, $expected, $what, $command, @node) = @_;
	my $before = cmdstat($command, 'calls', @node);
	works($session, $sql, $expected, $what);
	return cmdstat($command, 'calls', @node) - $before;
}

# --- single Redis, without and with the preload
contend('no preload', 0);

# --- single Redis: a set in one call each way
{
	my ($s1, @w) = map { session($node) } 1 .. 4;
	my @k = qw(p q r);

	works($s1, "SELECT redis_lock_acquire_all_session('{p,q,r}', 60000)", 't', 'one call: a session set');
	works($s1, 'SELECT redis_lock_release_all()', '3', 'one call: released (its scripts are loaded now)');
	is(calls_of($s1, "SELECT redis_lock_acquire_all_session('{p,q,r}', 60000)", 't', 'one call: the set again', 'evalsha'),
		1, 'one call: a set of 3 keys on one Redis is one EVALSHA');
	is(calls_of($s1, 'SELECT redis_lock_release_all()', '3', 'one call: released again', 'evalsha'),
		1, 'one call: and its release one more');

	$redis->command('SET', 'q2', 'other', 'NX', 'PX', 60000);
	my $keys = $redis->command('DBSIZE');
	is( calls_of(
			$s1, "SELECT redis_lock_acquire_all_session('{p2,q2,r2}', 60000)",
			'f', 'one call: q2 held by a foreign client, the set is refused', 'evalsha'),
		1,
		'one call: refused in one EVALSHA, with nothing to release after it');
	is($redis->command('DBSIZE'), $keys, 'one call: nothing written, not even a fencing token for p2');
	$redis->command('DEL', 'q2');

	works($s1, "SELECT redis_lock_acquire_all_session('{p,q,r}', 60000)", 't', 'wake: a session set');
	start_query($w[$_], "BEGIN; SELECT redis_lock_acquire('$k[$_]', 60000, 20000)") foreach 0 .. 2;
	ok( defined wait_until(
			10, sub { scalar(split /\n/, $redis->cli('KEYS', '*:waiters:*')) == 3 }),
		"wake: each key of the set has a waiter in its queue");
	my $sets = cmdstat('set', 'calls');
	works($s1, 'SELECT redis_lock_release_all()', '3', 'wake: the set released');
	foreach my $i (0 .. 2)
	{
		my ($got, $gerr) = finish_query($w[$i], 30);
		is("$got$gerr", 't', "wake: the waiter for $k[$i] gets it");
		works($w[$i], 'COMMIT', '', "wake: the waiter for $k[$i] commits");
	}
	is(cmdstat('set', 'calls') - $sets, 9,
		'wake: the release handed each key to its waiter (3 hand-offs, then 3 grants of 2 writes)');
	$_->quit foreach ($s1, @w);
}
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'redislock'");
$node->restart;
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'), 'redislock', 'redislock is preloaded');
contend('preload', 1);
diag sprintf 'single Redis cases done after %d s', time - $t0;

my $s = session($node);
my $mon = session($node);

# The backend's owner token pattern
my ($pid) = session_query($s, 'SELECT pg_backend_pid()');
my $ours = qr/\Apg:.*:$pid:[0-9]+:[0-9a-f]{32}\z/;

# --- Redis Cluster, 3 masters without replicas
my $cluster = RedisCluster->start_cluster(masters => 3, replicas => 0);
my @cm = $cluster->masters;
add_server($node, 'rc', qq{cluster '${\$cluster->seeds}', key_prefix 'ls:'});
session_query($s, 'SET redislock.server = rc');
my @ck = map { user_key_on($cluster, $_, 'ls:', 'k') } @cm;
my $cset = '{' . join(',', @ck) . '}';
# What each master holds at its own key, in the order of @cm
sub cluster_values
{
	return map { $cluster->command($cm[$_], 'GET', "ls:$ck[$_]") // 'nil' } 0 .. 2;
}
ok(3 == keys %{ { map { $cluster->keyslot("ls:$_") => 1 } @ck } },
	"cluster: keys @ck are in three slots, of three masters");

works($s, "BEGIN; SELECT redis_lock_acquire_all('$cset', 60000)", 't',
	'cluster: a transaction takes the set');
my @v = cluster_values();
ok((grep { $_ =~ $ours && $_ eq $v[0] } @v) == 3, "cluster: each master holds its key with our one token (@v)");
works($s, "SELECT count(*) FROM redis_locks() WHERE pid = pg_backend_pid() AND scope = 'transaction' AND granted",
	'3', 'cluster: redis_locks() shows the 3 keys');
works($s, 'COMMIT', '', 'cluster: commit');
is(join(' ', cluster_values()), 'nil nil nil', 'cluster: the commit removed all three');

$cluster->command_ok($cm[1], 'SET', "ls:$ck[1]", 'other', 'NX', 'PX', 60000);
works($s, "BEGIN; SELECT redis_lock_acquire_all('$cset', 60000)", 'f',
	'cluster: with one key held by a foreign client, the call returns false');
is(join(' ', cluster_values()), 'nil other nil', 'cluster: none of ours is left on any master');
works($s, "SELECT count(*) FROM redis_locks() WHERE pid = pg_backend_pid()", '0',
	'cluster: the backend holds nothing');
my $started = [gettimeofday];
start_query($s, "SELECT redis_lock_acquire_all('$cset', 60000, 5000)");
ok(all_wait($mon, 10, $pid), 'cluster: waiting for the set, with wait_ms 5000');
usleep(300_000);
is(join(' ', cluster_values()), 'nil other nil', 'cluster: while it waits, it holds none of the set');
$cluster->command($cm[1], 'DEL', "ls:$ck[1]");
($out, $err) = finish_query($s, 30);
is("$out$err", 't',
	sprintf('cluster: the foreign key deleted, it gets the set (%.2f s after the call)', tv_interval($started)));
@v = cluster_values();
ok((grep { $_ =~ $ours && $_ eq $v[0] } @v) == 3, "cluster: on all three masters (@v)");
works($s, 'COMMIT', '', 'cluster: commit');
is(join(' ', cluster_values()), 'nil nil nil', 'cluster: and all three are released');

works($s, "SELECT redis_lock_acquire_all_session('$cset', 60000)", 't', 'cluster: a session set');
@v = cluster_values();
ok((grep { $_ =~ $ours } @v) == 3, 'cluster: on all three masters');
works($s, 'SELECT redis_lock_release_all()', '3', 'cluster: redis_lock_release_all() releases its 3 keys');
is(join(' ', cluster_values()), 'nil nil nil', 'cluster: gone from every master');
my $tagged = $cluster->master_for_key('ls:{t}1');
works($s, q{SELECT redis_lock_acquire_all_session('{"{t}1","{t}2","{t}3"}', 60000)}, 't',
	'cluster: a session set of three keys of one slot');
works($s, 'SELECT redis_lock_release_all()', '3', 'cluster: released (its scripts are loaded now)');
is( calls_of(
		$s, q{SELECT redis_lock_acquire_all_session('{"{t}1","{t}2","{t}3"}', 60000)},
		't', 'cluster: the set again',
		'evalsha', $cluster, $tagged),
	1,
	'cluster: taken in one EVALSHA on its master');
is(calls_of($s, 'SELECT redis_lock_release_all()', '3', 'cluster: released', 'evalsha', $cluster, $tagged),
	3, 'cluster: each by a release of its own');
diag sprintf 'cluster case done after %d s', time - $t0;

# --- Redlock, 3 masters
my $masters = RedisMasters->start_masters(3);
my @m = map { $masters->master($_) } 0 .. 2;
add_server($node, 'rl', qq{redlock '${\$masters->endpoints}', key_prefix 'rl:'});
session_query($s, 'SET redislock.server = rl');
my @rk = qw(a b c);

# Every master's value of every key of the set, as "a=v0,v1,v2 b=..."
# with our tokens shown as "pg"
sub redlock_values
{
	return join ' ', map {
		my $k = $_;
		"$k=" . join(',', map { $_ =~ $ours ? 'pg' : $_ } values_on($masters, "rl:$k"));
	} @rk;
}

works($s, "BEGIN; SELECT redis_lock_acquire_all('{a,b,c}', 60000)", 't', 'redlock: a transaction takes the set');
my @all = map { values_on($masters, "rl:$_") } @rk;
my @tok = grep { $_ =~ $ours } @all;
ok(!(grep { my $k = $_; (grep { $_ =~ $ours } values_on($masters, "rl:$k")) < 2 } @rk),
	'redlock: every key is on at least 2 masters with our token: ' . redlock_values());
ok(@tok && !(grep { $_ ne $tok[0] } @tok), 'redlock: the same token for every key and master');
works($s, 'COMMIT', '', 'redlock: commit');
is(redlock_values(), 'a=nil,nil,nil b=nil,nil,nil c=nil,nil,nil', 'redlock: released everywhere');

$m[$_]->command('SET', 'rl:b', 'other', 'NX', 'PX', 60000) foreach 0, 1;
works($s, "SELECT redis_lock_acquire_all_session('{a,b,c}', 60000)", 'f',
	'redlock: b held by a foreign client on 2 of 3 masters: false');
ok( defined wait_until(
		5, sub { redlock_values() eq 'a=nil,nil,nil b=other,other,nil c=nil,nil,nil' }),
	'redlock: none of our tokens is left on any master: ' . redlock_values());
works($s, 'SELECT count(*) FROM redis_locks() WHERE pid = pg_backend_pid()', '0',
	'redlock: the backend holds nothing');
$started = [gettimeofday];
start_query($s, "SELECT redis_lock_acquire_all_session('{a,b,c}', 60000, 5000)");
ok(all_wait($mon, 10, $pid), 'redlock: waiting for the set, with wait_ms 5000');
usleep(300_000);
$m[1]->command('DEL', 'rl:b');
($out, $err) = finish_query($s, 30);
is("$out$err", 't',
	sprintf('redlock: waiting, it gets the set once one master lets b go (%.2f s after the call)',
		tv_interval($started)));
is(redlock_values(), 'a=pg,pg,pg b=other,pg,pg c=pg,pg,pg', 'redlock: by every master free for it');
works($s, 'SELECT redis_lock_release_all()', '3', 'redlock: released');
ok(defined wait_until(5, sub { redlock_values() eq 'a=nil,nil,nil b=other,nil,nil c=nil,nil,nil' }),
	'redlock: everywhere: ' . redlock_values());
$m[0]->command('DEL', 'rl:b');

$m[2]->kill9;
works($s, "BEGIN; SELECT redis_lock_acquire_all('{a,b,c}', 60000)", 't',
	'redlock: one master killed, the set is still granted');
is(redlock_values(), 'a=pg,pg,down b=pg,pg,down c=pg,pg,down', 'redlock: by the two others');
works($s, 'COMMIT', '', 'redlock: commit');
is(redlock_values(), 'a=nil,nil,down b=nil,nil,down c=nil,nil,down', 'redlock: released');

$m[1]->kill9;
($out, $err) = session_query($s, "SELECT redis_lock_acquire_all_session('{a,b,c}', 60000)");
like($err, qr/ERROR:\s+08\w{3}: /, 'redlock: two masters killed, a session set is an ERROR of class 08');
ok(defined wait_until(5, sub { redlock_values() eq 'a=nil,down,down b=nil,down,down c=nil,down,down' }),
	'redlock: and the master that answered is left with none of the set: ' . redlock_values());
works($s, 'SELECT count(*) FROM redis_locks() WHERE pid = pg_backend_pid()', '0',
	'redlock: the backend holds nothing');
diag sprintf 'redlock case done after %d s', time - $t0;

# --- Sentinel: a master under one Sentinel
my $group = RedisSentinel->start_sentinel_group(replicas => 0, sentinels => 1);
my $master = $group->master_port;
add_server($node, 'ha', $group->server_options . ", key_prefix 'ha:'");
session_query($s, 'SET redislock.server = ha');
works($s, "BEGIN; SELECT redis_lock_acquire_all('{s1,s2}', 60000)", 't',
	'sentinel: a transaction takes a set of two keys');
@v = map { $group->command($master, 'GET', "ha:$_") // 'nil' } qw(s1 s2);
ok((grep { $_ =~ $ours } @v) == 2, "sentinel: both are on the master with our token (@v)");
works($s, 'COMMIT', '', 'sentinel: commit');
is($group->command($master, 'EXISTS', 'ha:s1', 'ha:s2'), '0', 'sentinel: both are gone');

$_->quit foreach ($s, $mon);
$node->stop;
diag sprintf 'whole test took %d s', time - $t0;

done_testing();
