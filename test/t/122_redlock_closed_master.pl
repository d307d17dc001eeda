# A Redlock acquire that gets no quorum is released on every master,
# answered or not, also on a master whose connection closed during the
# acquire.  Three masters; the session reaches the third through a proxy
# on a port of its own:
# - master 1 holds the key for another owner, so the acquire cannot get
#   its quorum of 2;
# - the proxy passes the acquire to master 3, which runs it, holds back
#   the reply, and is stopped: the connection closes before the reply
#   comes.  The acquire answers false, master 2's copy is released at
#   once, and master 3 still carries our token;
# - a proxy on the same port again: the next call of the session connects
#   to master 3 afresh and the release kept for it goes out first, so our
#   token is gone from master 3 long before its TTL; master 1 keeps the
#   other owner's lock.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DelayProxy;
use RedisMasters;
use RedisTopology;
use RedlockTest qw(session works values_on);
use RedisLockTest qw(session_query start_query finish_query wait_until node_with_server);

my $t0 = time;
my $masters = RedisMasters->start_masters(3);
my @m = map { $masters->master($_) } 0 .. 2;
my @ports = map { $_->port } @m;
my ($proxy_port) = RedisTopology::reserve_ports(1);

# Replies pass at once for now (proxies are started before PostgreSQL).
my $proxy = DelayProxy->start($ports[2], 0, port => $proxy_port);

my $node = node_with_server(
	'closed_master', 'rl',
	"redlock '127.0.0.1:$ports[0], 127.0.0.1:$ports[1], 127.0.0.1:$proxy_port'",
	key_prefix => 'app:',
	before     => "ALTER SERVER redislock OPTIONS (SET port '$ports[0]');"
	  . ' GRANT USAGE ON FOREIGN SERVER redislock TO PUBLIC;',
	sql => 'ALTER DATABASE postgres SET redislock.command_timeout = 20000');

my $s = session($node);
my ($out, $err, $secs);

# --- the scripts are loaded on every master, master 3 through the proxy
works($s, "SELECT redis_lock_acquire_session('warm', 60000), redis_lock_release('warm')",
	't|t', 'a lock taken and released on the three masters');
is(join(' ', values_on($masters, 'app:warm')), 'nil nil nil', 'and gone from all of them');

# --- the acquire: master 1 says no, master 2 yes, master 3's reply is lost
$proxy->stop;
$proxy = DelayProxy->start($ports[2], 120, port => $proxy_port);
is($m[0]->command('SET', 'app:k', 'someone else', 'PX', 60000), 'OK',
	'master 1 holds the key for another owner');
start_query($s, "SELECT redis_lock_acquire_session('k', 60000)");
ok(defined wait_until(10, sub { ($m[2]->command('GET', 'app:k') // '') =~ /^pg:/ }),
	'the acquire ran on master 3');
$proxy->stop;
($out, $err, $secs) = finish_query($s, 30);
is($out, 'f', 'without a quorum, the acquire answers false');
diag "the acquire took $secs s and said: $err";
cmp_ok($secs, '<', 10, 'once master 3\'s connection closed, well before command_timeout');

my $token = $m[2]->command('GET', 'app:k') // 'nil';
like($token, qr/^pg:/, "right after, master 3 holds the key with our token ($token)");
ok(defined wait_until(5, sub { !defined $m[1]->command('GET', 'app:k') }),
	'master 2, which answered, was released at once');
cmp_ok($m[2]->command('PTTL', 'app:k'), '>', 50000, 'master 3\'s copy has most of its TTL left');

# --- master 3 reachable again on the same port
$proxy = DelayProxy->start($ports[2], 0, port => $proxy_port);
works($s, "SELECT redis_lock_acquire_session('next', 60000)", 't',
	'the next lock is granted, master 3 reached over a new connection');
is(join(' ', values_on($masters, 'app:k')), 'someone else nil nil',
	'the release kept for master 3 went out first: our token is gone from it,'
	  . ' and master 1 keeps the other owner\'s lock');
my @next = values_on($masters, 'app:next');
ok($next[0] =~ /^pg:/ && !(grep { $_ ne $next[0] } @next),
	'the next lock is on every master with one token')
  or diag "@next";
works($s, "SELECT redis_lock_release('next')", 't', 'and is released');
is(join(' ', values_on($masters, 'app:next')), 'nil nil nil', 'from every master');
diag sprintf 'whole test took %d s', time - $t0;

$proxy->stop;
$s->quit;
$node->stop;

done_testing();
