# The record of a committed decrement is cleared by a command that is held
# back until the backend next writes to that Redis: it goes out in the same
# write as the next command, and Redis reads both in one read.
# - After COMMIT the record stays while the session sends nothing; the
#   session's next command clears it, at no read of Redis's of its own.
# - An idle session's record is decided committed by redis_stock_recover():
#   its unit stays sold, its buyer stays marked, and its row is deleted.
# - The clear goes out when the session ends, and when its connection is
#   closed by redis_disconnect_all().
# - A clear held for a connection that Redis closed is lost with it: the
#   next decrement reconnects without a word, and recover clears the
#   record as committed.
# - The session's next decrement of the same item carries the clear in its
#   script: Redis runs one command, whose first step deletes the record.
#   Clears it has no room for go out ahead of it.
use strict;
use warnings;

use IO::Socket::INET;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query wait_until);

my $redis = RedisLockTest->start_redis();
# Rows go as soon as a recovery finds their records gone.
my $node = RedisLockTest->new_node('deferred', $redis, conf => 'redislock.purge_delay = 0');
$node->safe_psql('postgres', "SELECT redis_stock_set('h', 20)");

# The buyers named by the records of item h, sorted.
sub recorded_buyers
{
	my $ops = $redis->sibling('', 'ops', 'h') // return '';
	my %hash = @{ $redis->command('HGETALL', $ops) };
	return join ' ', sort map { (split / /)[1] } values %hash;
}

# One field of INFO: the reads Redis has done, or the calls of a command.
sub info_count
{
	my ($section, $re) = @_;
	my ($count) = $redis->command('INFO', $section) =~ $re;
	return $count // 0;
}

sub reads { return info_count('stats', qr/^total_reads_processed:(\d+)/m) }
sub hdels { return info_count('commandstats', qr/^cmdstat_hdel:calls=(\d+)/m) }

# The reads of Redis while session $s runs $sql.
sub reads_during
{
	my ($s, $sql) = @_;
	my $before = reads();
	my ($out, $err) = session_query($s, $sql);
	is($err, '', "it runs: $sql");
	return reads() - $before;
}

sub recover
{
	return $node->safe_psql('postgres',
		"SELECT key, qty, buyer, outcome FROM redis_stock_recover() ORDER BY buyer");
}

sub rows
{
	return $node->safe_psql('postgres', 'SELECT count(*) FROM redis_stock_decrements');
}

# --- the clear goes with the next command
my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
my ($out, $err) = session_query($s, "SELECT redis_stock_decr('h', 1, 'b1')");
is("$out$err", '19', 'a decrement commits');
is(recorded_buyers(), 'b1', 'its record stays while the session sends nothing');
is(hdels(), 0, 'no clear has reached Redis');
my $with_clear = reads_during($s, "SELECT redis_stock_get('h')");
is(recorded_buyers(), '', 'the session\'s next command clears it');
is(hdels(), 1, 'by one HDEL');
my $alone = reads_during($s, "SELECT redis_stock_get('h')");
is($with_clear, $alone,
	'Redis read the clear and the next command at once, as often as the command alone');

# --- an idle session's record
($out, $err) = session_query($s, "SELECT redis_stock_decr('h', 1, 'b2')");
is("$out$err", '18', 'another decrement commits, and the session stays idle');
is(recorded_buyers(), 'b2', 'its record is there');
is(rows(), '2', 'beside the rows of both decrements');
is(recover(), 'h|1|b2|committed', 'recover decides the idle session\'s record committed');
is($redis->command('GET', 'h'), '18', 'its unit stays sold');
is(recorded_buyers(), '', 'its record is cleared');
is(rows(), '0', 'and the rows of both are deleted');
is($node->safe_psql('postgres', "SELECT redis_stock_decr('h', 1, 'b2')"),
	'-2', 'its buyer may not buy again');
($out, $err) = session_query($s, "SELECT redis_stock_get('h')");
is("$out$err", '18', 'the session\'s clear, now late, changes nothing');

# --- at the session's end, and when its connection closes
($out, $err) = session_query($s, "SELECT redis_stock_decr('h', 1, 'b3')");
is("$out$err", '17', 'a decrement commits');
is(recorded_buyers(), 'b3', 'its record waits');
$s->quit;
ok(defined wait_until(10, sub { recorded_buyers() eq '' }),
	'the clear reaches Redis when the session ends');

$s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
($out, $err) = session_query($s, "SELECT redis_stock_decr('h', 1, 'b4')");
is("$out$err", '16', 'a decrement commits');
is(recorded_buyers(), 'b4', 'its record waits');
($out, $err) = session_query($s, 'SELECT redis_disconnect_all()');
is("$out$err", 't', 'the session closes its connections');
ok(defined wait_until(10, sub { recorded_buyers() eq '' }),
	'the clear goes out as its connection closes');

# --- a clear held for a connection that Redis closed
($out, $err) = session_query($s, "SELECT redis_stock_decr('h', 1, 'b5')");
is("$out$err", '15', 'a decrement commits');
cmp_ok($redis->command('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes'),
	'>=', 1, 'Redis closes the idle connection');
# Valkey may answer CLIENT KILL before it has closed the connection
ok(defined wait_until(10, sub { $redis->client_count == 0 }),
	'and it is closed');
($out, $err) = session_query($s, "SELECT redis_stock_decr('h', 1, 'b6')");
is("$out$err", '14', 'the next decrement reconnects without a word');
is(recorded_buyers(), 'b5 b6', 'the clear held for the closed connection was lost');
is( recover(),
	join("\n", 'h|1|b5|committed', 'h|1|b6|committed'),
	'recover decides both records committed');
is($redis->command('GET', 'h'), '14', 'and keeps their units sold');
is(recorded_buyers(), '', 'no record is left');
is(rows(), '0', 'nor any row');

# --- the next decrement of the item carries the clear
($out, $err) = session_query($s, "SELECT redis_stock_decr('h', 1, 'b7')");
is("$out$err", '13', 'a decrement commits');
my $monitor = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $redis->port)
  or die "cannot connect to Redis: $!";
print $monitor "MONITOR\r\n";
<$monitor>;
($out, $err) = session_query($s, "SELECT redis_stock_decr('h', 1, 'b8')");
is("$out$err", '12', 'the session\'s next decrement of the item');
my @commands;
{
	local $SIG{ALRM} = sub { die "the decrement's script not seen by MONITOR within 30 s\n" };
	alarm 30;
	while (my $line = <$monitor>)
	{
		my ($client, $command) = $line =~ /^\+\S+ \[\d+ (\S+)\] "(\w+)"/ or next;
		push @commands, $client eq 'lua' ? "lua:$command" : $command;
		last if $command eq 'SADD';
	}
	alarm 0;
}
close $monitor;
is( join(' ', @commands),
	'EVALSHA lua:HDEL lua:EXISTS lua:SISMEMBER lua:DECRBY lua:HSET lua:SADD',
	'Redis runs one command, the script, which deletes the held record first');
is(recorded_buyers(), 'b8', 'the first decrement\'s record is cleared');

# --- more clears than a decrement has room for: the rest go ahead of it
($out, $err) = session_query($s,
	"BEGIN; SELECT redis_stock_decr('h', 1, 'c' || i) FROM generate_series(1, 5) i; COMMIT");
is($err, '', 'a transaction of five decrements of the item commits');
is(recorded_buyers(), 'c1 c2 c3 c4 c5',
	'their records wait, and the first of them carried the clear before');
($out, $err) = session_query($s, "SELECT redis_stock_decr('h', 1, 'c6')");
is("$out$err", '6', 'the next decrement');
is(recorded_buyers(), 'c6', 'clears them all');
$s->quit;

$node->stop;
$redis->stop;

done_testing();
