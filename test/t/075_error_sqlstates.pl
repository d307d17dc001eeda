# Redis error replies come out with the SQLSTATE a PostgreSQL user would
# expect: NOPERM 42501 (also when it is SCRIPT LOAD that is refused, which
# must not be reported as NOSCRIPT); READONLY, MASTERDOWN, LOADING and
# CLUSTERDOWN class 08; OOM 53200; WRONGTYPE 42809; BUSY 55006; a code
# without a mapping (NOREPLICAS) 38000.  The message names the key as the
# user wrote it (without the server's key_prefix), Redis' own text is in the
# DETAIL, and once the condition is lifted the next call of the same session
# succeeds.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query wait_until);

my $redis = RedisLockTest->start_redis();
my $master = RedisLockTest->start_redis();
my $cluster = RedisLockTest->start_redis(
	args => [
		'--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf',
		# so that it serves slots soon after it is given them
		'--cluster-node-timeout', '500',
		# a free bus port, rather than the default port + 10000
		'--cluster-port', PostgreSQL::Test::Cluster::get_free_port()
	]);
my $node = RedisLockTest->new_node('sqlstates', $redis);
my ($port, $cluster_port) = ($redis->port, $cluster->port);

is($redis->cli('ACL', 'SETUSER', 'limited', 'on', '>pw', '~p:ok*', '+@all'),
	'OK', 'Redis user "limited" may use keys p:ok* only');
is($redis->cli('ACL', 'SETUSER', 'noload', 'on', '>pw', '~*', '+@all', '-script|load'),
	'OK', 'Redis user "noload" may not load scripts');
$node->safe_psql(
	'postgres', qq{
	ALTER SERVER redislock OPTIONS (ADD key_prefix 'p:');
	CREATE SERVER acl FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$port', key_prefix 'p:');
	CREATE USER MAPPING FOR PUBLIC SERVER acl
		OPTIONS (username 'limited', password 'pw');
	CREATE SERVER noload FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$port', key_prefix 'p:');
	CREATE USER MAPPING FOR PUBLIC SERVER noload
		OPTIONS (username 'noload', password 'pw');
	CREATE SERVER cl FOREIGN DATA WRAPPER redislock
		OPTIONS (host '127.0.0.1', port '$cluster_port', key_prefix 'p:');
	GRANT USAGE ON FOREIGN SERVER acl, noload, cl TO PUBLIC;
});

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
session_query($s, 'SET redislock.command_timeout = 2000');
my ($out, $err);

# Run $sql and check its error: SQLSTATE $code, the primary message naming
# "$key" (unless undef) but not its prefixed form, and a DETAIL matching
# $detail.
sub error_is
{
	my ($sql, $code, $key, $detail, $name) = @_;
	($out, $err) = session_query($s, $sql);
	like($err, qr/ERROR:\s+$code: /, "$name: SQLSTATE $code");
	if (defined $key)
	{
		like($err, qr/ERROR:[^\n]*"\Q$key\E"/, "$name: the message names the key");
		unlike($err, qr/p:\Q$key\E/, "$name: as the user wrote it");
	}
	like($err, qr/DETAIL:[^\n]*$detail/i, "$name: Redis' text is in the DETAIL");
	return;
}

# Run $sql and check that it succeeds without a message.
sub works
{
	my ($sql, $expected, $name) = @_;
	($out, $err) = session_query($s, $sql);
	is($out, $expected, "$name: the next call succeeds");
	is($err, '', "$name: without any message");
	return;
}

# Wait until a command of redis-cli's is answered with something matching $re.
sub wait_reply
{
	my ($r, $re, @cmd) = @_;
	return defined wait_until(10, sub { $r->cli(@cmd) =~ $re });
}

# --- NOPERM on a key
session_query($s, 'SET redislock.server = acl');
error_is("SELECT redis_stock_get('no')", '42501', 'no', 'no permissions', 'NOPERM, read');
error_is("SELECT redis_lock_acquire('no', 30000)", '42501', 'no', 'no permissions',
	'NOPERM, acquire');
$redis->cli('ACL', 'SETUSER', 'limited', 'allkeys');
works("SELECT redis_lock_acquire('no', 30000)", 't', 'NOPERM lifted');

# --- NOPERM on SCRIPT LOAD, after SCRIPT FLUSH
session_query($s, 'SET redislock.server = noload');
$redis->cli('SCRIPT', 'FLUSH');
error_is("SELECT redis_lock_acquire('sl', 30000)", '42501', undef, 'script\|load',
	'NOPERM on SCRIPT LOAD');
unlike($err, qr/NOSCRIPT/, 'NOPERM on SCRIPT LOAD: not reported as NOSCRIPT');
$redis->cli('ACL', 'SETUSER', 'noload', '+script|load');
works("SELECT redis_lock_acquire('sl', 30000)", 't', 'SCRIPT LOAD allowed');
session_query($s, 'RESET redislock.server');

# --- READONLY: a write to a replica
$master->cli('CONFIG', 'SET', 'repl-diskless-sync-delay', '0');
is($redis->cli('REPLICAOF', '127.0.0.1', $master->port), 'OK', 'Redis becomes a replica');
ok(wait_reply($redis, qr/master_link_status:up/, 'INFO', 'replication'),
	'and is in sync with its master');
error_is("SELECT redis_lock_acquire('ro', 30000)", '08006', undef, 'read only replica',
	'READONLY');
$redis->cli('REPLICAOF', 'NO', 'ONE');
works("SELECT redis_lock_acquire('ro', 30000)", 't', 'READONLY lifted');

# --- MASTERDOWN: a replica that serves no stale data, its master gone
$redis->cli('CONFIG', 'SET', 'replica-serve-stale-data', 'no');
$redis->cli('REPLICAOF', '127.0.0.1', PostgreSQL::Test::Cluster::get_free_port());
ok(wait_reply($redis, qr/^MASTERDOWN/, 'GET', 'x'), 'Redis is a replica without master');
error_is("SELECT redis_stock_get('md')", '08006', undef, 'master', 'MASTERDOWN');
$redis->cli('REPLICAOF', 'NO', 'ONE');
$redis->cli('CONFIG', 'SET', 'replica-serve-stale-data', 'yes');
works("SELECT redis_stock_get('md')", '', 'MASTERDOWN lifted');

# --- LOADING: while DEBUG RELOAD loads keys slowly
$redis->cli('DEBUG', 'POPULATE', '10000', 'pop');
$redis->cli('CONFIG', 'SET', 'key-load-delay', '100');
$redis->cli('CONFIG', 'SET', 'loading-process-events-interval-bytes', '1024');
my $reload = IPC::Run::start(
	[ 'redis-cli', '-h', '127.0.0.1', '-p', $port, 'DEBUG', 'RELOAD' ],
	'<', \undef, '>', \my $reload_out, '2>', \my $reload_err);
ok(wait_reply($redis, qr/^LOADING/, 'GET', 'x'), 'Redis is loading its data set');
error_is("SELECT redis_stock_get('ld')", '08006', undef, 'loading', 'LOADING');
$reload->finish;
$redis->cli('CONFIG', 'SET', 'key-load-delay', '0');
$redis->cli('FLUSHALL');
works("SELECT redis_stock_get('ld')", '', 'LOADING over');

# --- CLUSTERDOWN: a cluster node that serves no slot
session_query($s, 'SET redislock.server = cl');
error_is("SELECT redis_stock_get('cd')", '08006', undef, 'not served', 'CLUSTERDOWN');
$cluster->cli('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
ok(wait_reply($cluster, qr/cluster_state:ok/, 'CLUSTER', 'INFO'), 'the node serves every slot');
works("SELECT redis_stock_get('cd')", '', 'CLUSTERDOWN lifted');
session_query($s, 'RESET redislock.server');

# --- OOM
$redis->cli('SET', 'p:om', '5');
$redis->cli('CONFIG', 'SET', 'maxmemory', '1');
error_is("SELECT redis_lock_acquire('om_free', 30000)", '53200', 'om_free', 'maxmemory',
	'OOM, acquire');
error_is("SELECT redis_stock_decr('om')", '53200', 'om', 'maxmemory', 'OOM, decrement');
$redis->cli('CONFIG', 'SET', 'maxmemory', '0');
works("SELECT redis_stock_decr('om')", '4', 'OOM lifted');

# --- WRONGTYPE
$redis->cli('RPUSH', 'p:wt', 'x');
error_is("SELECT redis_stock_get('wt')", '42809', 'wt', 'wrong kind', 'WRONGTYPE, read');
error_is("SELECT redis_lock_acquire('wt', 30000)", '42809', 'wt', 'wrong kind',
	'WRONGTYPE, acquire');
$redis->cli('DEL', 'p:wt');
works("SELECT redis_lock_acquire('wt', 30000)", 't', 'WRONGTYPE lifted');

# --- BUSY: another client runs a script that does not end
$redis->cli('CONFIG', 'SET', 'busy-reply-threshold', '100');
my $busy = IPC::Run::start(
	[ 'redis-cli', '-h', '127.0.0.1', '-p', $port, 'EVAL', 'while true do end', '0' ],
	'<', \undef, '>', \my $busy_out, '2>', \my $busy_err);
ok(wait_reply($redis, qr/^BUSY/, 'PING'), 'Redis is busy running a script');
error_is("SELECT redis_stock_get('bz')", '55006', undef, 'busy', 'BUSY');
$redis->cli('SCRIPT', 'KILL');
$busy->finish;
ok(wait_reply($redis, qr/^PONG$/, 'PING'), 'the script was killed');
works("SELECT redis_stock_get('bz')", '', 'BUSY over');

# --- a code without a mapping
$redis->cli('CONFIG', 'SET', 'min-replicas-to-write', '1');
error_is("SELECT redis_lock_acquire('nr', 30000)", '38000', undef, 'enough good replicas',
	'NOREPLICAS');
$redis->cli('CONFIG', 'SET', 'min-replicas-to-write', '0');
works("SELECT redis_lock_acquire('nr', 30000)", 't', 'NOREPLICAS lifted');

$s->quit;
$node->stop;
$cluster->stop;
$master->stop;
$redis->stop;

done_testing();
