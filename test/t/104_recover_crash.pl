# Decrements of transactions that a crash ended are settled by
# redis_stock_recover().  Each decrement's record names the (sub)transaction
# that made it, whose ID was made durable first; after a backend's SIGKILL
# (the postmaster restarts every backend) or an immediate shutdown, recover
# gives back the units and the buyers of those that did not commit (outcome
# "aborted"), while committed orders keep their units and their buyers.
# A decrement-only transaction in progress at the crash may lose its ID
# (nothing of it reached WAL), and the transactions run after the restart
# may get that ID again and commit: its record is still aborted, for no row
# of its decrement committed.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query wait_until crash_restart);

my $redis = RedisLockTest->start_redis();
my $node = RedisLockTest->new_node('recover', $redis, conf => 'restart_after_crash = on');
$node->safe_psql('postgres',
	"SELECT redis_stock_set(k, 100) FROM unnest(ARRAY['a', 'b', 'c', 'f']) k");

# Run $sql in a new session and return its output.
sub sql
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

# The rows of redis_stock_recover(), one per line, buyer NULL as '-'.
sub recover
{
	return sql(
		"SELECT key, xid, qty, coalesce(buyer, '-'), outcome FROM redis_stock_recover() ORDER BY key, xid"
	);
}

# The transaction IDs named by the records of item $key, sorted.
sub recorded_xids
{
	my ($key) = @_;
	my $ops = $redis->sibling('', 'ops', $key) // return '';
	my %hash = @{ $redis->command('HGETALL', $ops) };
	return join ' ', sort { $a <=> $b } map { (split /:/)[-2] } keys %hash;
}

# Open a session and start a transaction in it that runs $sql; returns the
# session and the output.
sub open_transaction
{
	my ($sql) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
	my ($out, $err) = session_query($s, "BEGIN; $sql");
	is($err, '', "an open transaction runs: $sql");
	return ($s, $out);
}

# Whether buyer $buyer of item $key is free to buy, by buying one unit.
sub buys
{
	my ($key, $buyer) = @_;
	return sql("SELECT redis_stock_decr('$key', 1, '$buyer')") ne '-2';
}

# --- SIGKILL of a backend with an uncommitted decrement
is(sql("SELECT redis_stock_decr('a', 1, 'c1')"), '99', 'a committed order of item a');
my ($sk, $out) = open_transaction(
	"SELECT redis_stock_decr('a', 2, 'u1'), pg_current_xact_id(), pg_backend_pid()");
my ($left, $xid, $pid) = split /\|/, $out;
is($left, '97', 'and an uncommitted one');
ok(defined wait_until(10, sub { recorded_xids('a') eq $xid }),
	'whose record names its transaction, the committed one\'s cleared');

ok(crash_restart($node, $pid), 'the server restarted after the crash');
$sk->quit;
is($redis->command('GET', 'a'), '97', 'nothing gave the units back');
is(recover(), "a|$xid|2|u1|aborted", 'recover finds the killed transaction\'s decrement aborted');
is($redis->command('GET', 'a'), '99', 'and gives its units back');
ok(buys('a', 'u1'), 'and its buyer may buy again');
ok(!buys('a', 'c1'), 'the committed buyer may not');
ok(defined wait_until(10, sub { recorded_xids('a') eq '' }), 'no record is left');
is(recover(), '', 'a second recover finds nothing');
is($redis->command('GET', 'a'), '98', 'and the stock is exact');

# --- immediate shutdown with several uncommitted decrements
is(sql("SELECT redis_stock_decr('b', 1, 'y1')"), '99', 'committed: one unit of b');
is( sql(
		"BEGIN; SELECT redis_stock_decr('c', 5); SELECT redis_stock_decr('b', 2, 'y2'); COMMIT"),
	"95\n97",
	'committed: five units of c and two of b in one transaction');
my ($s1, $out1) = open_transaction(
	"SELECT redis_stock_decr('b', 3, 'x1'); SELECT redis_stock_decr('c', 4); SELECT pg_current_xact_id()");
my $xid1 = (split /\n/, $out1)[2];
my ($s2, $out2) = open_transaction("SELECT redis_stock_decr('f', 1, 'z')");
is($out2, '99', 'a decrement-only transaction');
my ($s3, $out3) = open_transaction(
	"SAVEPOINT sp; SELECT redis_stock_decr('b', 1, 'x3'); SELECT pg_current_xact_id()");
my $xid3 = (split /\n/, $out3)[1];
ok(defined wait_until(10, sub { recorded_xids('b') =~ /\A$xid1 [0-9]+\z/ }),
	'records of the open transactions only, one of a subtransaction');
my $subxid = (split / /, recorded_xids('b'))[1];
cmp_ok($subxid, '>', $xid3, 'which has an ID of its own');
my $fxid = recorded_xids('f');
is(join(' ', map { $redis->command('GET', $_) } qw(b c f)), '93 91 99', 'stocks b, c and f');

$node->stop('immediate');
$node->start;
$_->quit foreach ($s1, $s2, $s3);

# Run transactions until one gets an ID beyond the decrement-only one's.
my @xids;
while (@xids < 1000)
{
	push @xids, sql(join '', ('SELECT pg_current_xact_id();') x 50) =~ /([0-9]+)/g;
	last if $xids[-1] > $fxid;
}
cmp_ok($xids[-1], '>', $fxid, 'transactions run after the restart reach past the crashed ID');

is( recover(),
	join("\n",
		"b|$xid1|3|x1|aborted", "b|$subxid|1|x3|aborted",
		"c|$xid1|4|-|aborted", "f|$fxid|1|z|aborted"),
	'recover finds every uncommitted decrement aborted');
is(join(' ', map { $redis->command('GET', $_) } qw(b c f)), '97 95 100',
	'and gives their units back: only the committed orders are taken');
ok(buys('b', 'x1') && buys('b', 'x3') && buys('f', 'z'), 'their buyers may buy again');
ok(!buys('b', 'y1') && !buys('b', 'y2'), 'the committed buyers may not');
ok(defined wait_until(10, sub { recorded_xids('b') eq '' && recorded_xids('f') eq '' }),
	'the records of those new orders are cleared as their sessions end');
is(recover(), '', 'a second recover finds nothing');

$node->stop;
$redis->stop;

done_testing();
