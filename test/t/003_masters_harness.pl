# Checks RedisMasters: independent masters on ports of their own block,
# each killed, restarted, paused and put to sleep on its own; a concurrent
# script gets another block of ports.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use RedisMasters;

my $masters = RedisMasters->start_masters(3);
is($masters->count, 3, 'three masters');
like($masters->endpoints, qr/^127\.0\.0\.1:\d+(, 127\.0\.0\.1:\d+){2}$/, 'endpoints lists them');
my @ports = map { $masters->master($_)->port } 0 .. 2;
is(join(', ', map { "127.0.0.1:$_" } @ports), $masters->endpoints, 'master(i) in endpoint order');
ok(!(grep { $_ >= 32768 } @ports), 'ports below the ephemeral range');
is($masters->master($_)->cli('PING'), 'PONG', "master $_ answers") foreach 0 .. 2;

$masters->master(0)->cli('SET', 'k', 'v');
is($masters->master(1)->cli('EXISTS', 'k'), '0', 'masters share nothing');

# Another script, while this one holds its ports, is given other ones.  (It
# writes them to a file: PostgreSQL::Test::Utils sends its stdout to a log.)
my $file = PostgreSQL::Test::Utils::tempdir() . '/ports';
run_command(
	[ $^X, (map { "-I$_" } @INC), '-MRedisTopology', '-e',
		'open my $f, ">", $ARGV[0]; print $f join " ", RedisTopology::reserve_ports(3)',
		$file ]);
my $theirs = slurp_file($file);
my %ours = map { $_ => 1 } @ports;
ok(($theirs =~ /^\d+ \d+ \d+$/) && !(grep { $ours{$_} } split / /, $theirs),
	"a concurrent script got other ports ($theirs)");

# One master at a time
my $m0 = $masters->master(0);
$m0->kill9;
like($m0->cli('PING'), qr/Could not connect/, 'master 0 killed');
is($masters->master(1)->cli('PING'), 'PONG', 'the others still answer');
$m0->restart;
is($m0->port, $ports[0], 'master 0 restarted on its port');
is($m0->cli('EXISTS', 'k'), '0', 'empty');

my $m1 = $masters->master(1);
$m1->pause;
ok(!$m1->answers(0.3), 'master 1 paused');
$m1->resume;
ok($m1->answers(2), 'and resumed');

my $m2 = $masters->master(2);
my $sleeper = $m2->debug_sleep(1);
ok(!$m2->answers(0.2), 'master 2 asleep');
$m2->wake($sleeper);
ok($m2->answers(1), 'and awake');

# With a password
my $locked = RedisMasters->start_masters(3, password => 'pw');
my $port = $locked->master(0)->port;
ok(!(grep { $_ == $port } @ports), 'a second group has other ports');
like((run_command([ 'redis-cli', '-p', $port, 'PING' ]))[0], qr/NOAUTH/,
	'its masters want the password');
is($locked->master(0)->cli('PING'), 'PONG', 'which cli gives');

done_testing();
