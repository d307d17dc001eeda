# A transaction ID names one transaction only within one history of a
# PostgreSQL cluster.  A standby promoted while the old primary lives on
# keeps the system identifier and goes on from the same IDs, so
# redis_stock_recover() decides only the records of its own timeline, for
# IDs it has assigned, and reports the rest, untouched:
# - on the promoted standby, a decrement in progress on the old primary is
#   "other timeline", not "aborted" (giving it back would oversell once the
#   old primary commits it), also after the standby has reused its ID;
# - a record of 1.1 whose ID is beyond the next one is "future", and
#   recover does not fail on it; one of 1.2 is "aborted": no writer with
#   that ID runs, and no row of it committed;
# - a record of 1.1, which names no timeline, is decided on the timeline
#   the update from 1.1 ran on, and only there ("unknown timeline");
# - a give-back that Redis refuses is "give-back failed", with a WARNING,
#   and its record stays.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query wait_until);

my $redis = RedisLockTest->start_redis();
my $port = $redis->port;
my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->start;
$primary->safe_psql(
	'postgres', qq{
	CREATE EXTENSION redislock VERSION '1.1';
	ALTER EXTENSION redislock UPDATE;
	ALTER SERVER redislock OPTIONS (SET port '$port');
	SELECT redis_stock_set('a', 100);
});

# The rows of redis_stock_recover() on $node, one per line, and its stderr.
sub recover
{
	my ($node) = @_;
	my ($out, $err);
	$node->psql(
		'postgres',
		"SELECT key, xid, qty, buyer, outcome FROM redis_stock_recover() ORDER BY key COLLATE \"C\", xid, buyer",
		stdout => \$out,
		stderr => \$err);
	return ($out, $err);
}

# Open a session on $node, start a transaction that runs $sql in it, and
# return the session and the output.
sub open_transaction
{
	my ($node, $sql) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
	my ($out, $err) = session_query($s, "BEGIN; $sql");
	is($err, '', "an open transaction runs: $sql");
	return ($s, $out);
}

# Burn $n transaction IDs on $node.
sub burn_xids
{
	my ($node, $n) = @_;
	$node->safe_psql('postgres', join '', ('SELECT pg_current_xact_id();') x $n);
	return;
}

my $sysid = $primary->safe_psql('postgres',
	'SELECT system_identifier FROM pg_control_system()');
my $aborted = $primary->safe_psql('postgres',
	'BEGIN; SELECT pg_current_xact_id(); ROLLBACK');
my ($sa, $out) = open_transaction($primary,
	"SELECT redis_stock_decr('a', 2, 'inflight'), pg_current_xact_id()");
my ($left, $xa) = split /\|/, $out;
is($left, '98', 'the primary takes two units in a transaction left open');

# Records as other histories leave them, each with the unit it took: of a
# timeline to come, and of 1.1.  An item in the same slot as a holds a
# string that INCRBY refuses, and a record of 1.1 to give back.
my $ops = $redis->sibling('', 'ops', 'a');
like($ops, qr/\A\{[0-9]+\}:ops:a\z/, 'the decrement left its record');
my $buyers = $ops =~ s/:ops:/:buyers:/r;
$redis->command('HSET', $ops, "$sysid:2:$aborted:1", '1 t2', "$sysid:$aborted:2", '1 old');
$redis->command('SADD', $buyers, qw(t2 old));
$redis->command('DECRBY', 'a', 2);
(my $ops_w = $ops) =~ s/:a\z/:{a}w/;
$redis->command('SET', '{a}w', 'not a number');
$redis->command('HSET', $ops_w, "$sysid:$aborted:3", '3 wb');

my ($rows, $err) = recover($primary);
is( $rows,
	join("\n",
		"a|$aborted|1|old|aborted",
		"a|$aborted|1|t2|other timeline",
		"a|$xa|2|inflight|in progress",
		"{a}w|$aborted|3|wb|give-back failed"),
	'the primary decides its own records, 1.1\'s too, and leaves the other');
like($err, qr/WARNING:  1 decrement record of Redis stock on server "redislock" was not settled/,
	'a refused give-back is reported');
like($err, qr/ERR value is not an integer/, 'with what Redis answered');
is($redis->command('GET', 'a'), '97', 'the aborted 1.1 record is given back');
is($redis->command('HGET', $ops, "$sysid:2:$aborted:1"), '1 t2',
	'the other timeline\'s record stays');
is($redis->command('HGET', $ops_w, "$sysid:$aborted:3"), '3 wb',
	'the refused one too');

# A standby, promoted while the primary lives on: a second timeline.
$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);
($rows, $err) = recover($standby);
like($err, qr/ERROR:  Redis stock cannot be recovered during recovery/,
	'a standby does not decide records');
$standby->promote;

($rows, $err) = recover($standby);
is( $rows,
	join("\n",
		"a|$aborted|1|t2|aborted",
		"a|$xa|2|inflight|other timeline",
		"{a}w|$aborted|3|wb|unknown timeline"),
	'the promoted standby decides only the record of its timeline');
is($redis->command('GET', 'a'), '98',
	'it gives back that record\'s unit, not those of the transaction open at the split');

# The primary starts a transaction whose ID the standby has not reached, and
# records appear whose IDs neither has: of a clone, or of a history left.
burn_xids($primary, 20);
my ($sb, $outb) = open_transaction($primary,
	"SELECT redis_stock_decr('a', 1, 'late'), pg_current_xact_id()");
my ($leftb, $xb) = split /\|/, $outb;
is($leftb, '97', 'after the split, the primary takes a unit');
cmp_ok($xb, '>=',
	$standby->safe_psql('postgres', 'SELECT pg_snapshot_xmax(pg_current_snapshot())'),
	'under an ID the promoted standby has not assigned');
my $future = $xb + 100000;
$redis->command('HSET', $ops, "$sysid:1:$future:4", '1 fut', "$sysid:$future:5", '1 oldfut');
$redis->command('SADD', $buyers, qw(fut oldfut));
$redis->command('DECRBY', 'a', 2);

my $expected_standby = join("\n",
	"a|$xa|2|inflight|other timeline",
	"a|$xb|1|late|other timeline",
	"a|$future|1|fut|other timeline",
	"a|$future|1|oldfut|unknown timeline",
	"{a}w|$aborted|3|wb|unknown timeline");
($rows, $err) = recover($standby);
is($rows, $expected_standby, 'the promoted standby leaves the primary\'s later records');
is($err, '', 'and does not fail on IDs it has not assigned');

burn_xids($standby, 40);
cmp_ok($standby->safe_psql('postgres', 'SELECT pg_current_xact_id()'), '>', $xb,
	'the promoted standby reuses the primary\'s later IDs');
($rows, $err) = recover($standby);
is($rows, $expected_standby, 'and still leaves the primary\'s records');
is($redis->command('GET', 'a'), '95', 'the stock is as the primary left it');

($out, $err) = session_query($sa, 'COMMIT');
is($err, '', 'the primary commits the transaction open at the split');
($out, $err) = session_query($sb, 'ROLLBACK');
is($err, '', 'and rolls back the later one');
$_->quit foreach ($sa, $sb);
is($redis->command('GET', 'a'), '96',
	'whose unit is given back, by the record the standby left');
ok( defined wait_until(
		10, sub { !grep { /:($xa|$xb):/ } @{ $redis->command('HKEYS', $ops) } }),
	'neither leaves a record');

($rows, $err) = recover($primary);
is( $rows,
	join("\n",
		"a|$future|1|fut|aborted",
		"a|$future|1|oldfut|future",
		"{a}w|$aborted|3|wb|give-back failed"),
	'the primary gives back its record of an ID it has not assigned, and leaves that of 1.1');
unlike($err, qr/ERROR/, 'and fails on none');
is($redis->command('GET', 'a'), '97', 'the stock is exact');

$standby->stop;
$primary->stop;
$redis->stop;

done_testing();
