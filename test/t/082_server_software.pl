# A connection asks the server what it is (HELLO) and redis_server_nodes()
# shows it; what a server can do is learned from its replies.
# - the software and version shown are those the server's INFO gives
#   (Redis' redis_version, Valkey's valkey_version);
# - a server without HELLO (older than Redis 6; renamed away here) still
#   serves, and nothing is shown;
# - a server that runs no Lua scripts (EVALSHA renamed away here; a Valkey
#   9.1 without its Lua engine answers the same) refuses a lock with
#   0A000 and a hint that names scripting, and keeps no key;
# - a user denied scripts by ACL gets 42501 and a hint that names
#   @scripting;
# - on Valkey 9.1 and later, whose Lua engine is a module, a server whose
#   module was unloaded refuses the same way (skipped elsewhere).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest;

my $redis = RedisLockTest->start_redis();
my $port = $redis->port;
my $node = RedisLockTest->new_node('software', $redis);

my %info = map { /^(\w+):(.*?)\r?$/ ? ($1 => $2) : () } split /\n/,
  $redis->command('INFO', 'server');
my ($software, $version) = defined $info{valkey_version}
  ? ('valkey', $info{valkey_version}) : ('redis', $info{redis_version});

is( $node->safe_psql('postgres',
		"SELECT redis_lock_acquire('k'); SELECT software, version FROM redis_server_nodes()"),
	"t\n$software|$version",
	"redis_server_nodes() shows the software and version INFO gives: $software $version");

my $old = RedisLockTest->start_redis(args => [ '--rename-command', 'HELLO', '' ]);
$node->safe_psql('postgres',
	"CREATE SERVER nohello FOREIGN DATA WRAPPER redislock OPTIONS (port '" . $old->port . "')");
is( $node->safe_psql('postgres',
		"SET redislock.server = nohello; SELECT redis_lock_acquire('h'); "
		  . "SELECT coalesce(software, '-'), connected FROM redis_server_nodes()"),
	"t\n-|t",
	'a server without HELLO serves, and no software is shown');

# An ACL user that may not run scripts.
$redis->command('ACL', 'SETUSER', 'noscripts', 'on', '>pw', '~*', '&*', '+@all', '-@scripting');
$node->safe_psql('postgres', qq{
	CREATE SERVER noscripts FOREIGN DATA WRAPPER redislock OPTIONS (port '$port');
	CREATE USER MAPPING FOR CURRENT_USER SERVER noscripts OPTIONS (username 'noscripts', password 'pw');
});

my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"SET redislock.server = noscripts; SELECT redis_lock_acquire('s')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($stderr, qr/ERROR:  42501: .*\n(?:.*\n)*HINT:  .*may not run scripts.*\@scripting/,
	'a user denied scripts gets 42501 and a hint naming @scripting');

my $plain = RedisLockTest->start_redis(
	args => [ '--rename-command', 'EVALSHA', '', '--rename-command', 'EVAL', '' ]);
$node->safe_psql('postgres', "CREATE SERVER plain FOREIGN DATA WRAPPER redislock OPTIONS (port '"
	  . $plain->port . "')");
($ret, $stdout, $stderr) = $node->psql('postgres',
	"SET redislock.server = plain; SELECT redis_lock_acquire('p')",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($stderr, qr/ERROR:  0A000: .*\n(?:.*\n)*HINT:  redislock runs its operations as Lua scripts/,
	'a server that runs no scripts refuses a lock with 0A000 and a hint naming scripting');
is($plain->command('EXISTS', 'p'), 0, 'and keeps no key');

# Does MODULE LIST name a module "lua"?
sub has_lua_module
{
	my ($redis) = @_;
	my $modules = $redis->command('MODULE', 'LIST');
	return ref $modules eq 'ARRAY'
	  && grep { ref $_ eq 'ARRAY' && grep { defined && !ref && $_ eq 'lua' } @$_ } @$modules;
}

# Valkey 9.1 runs Lua as a module, which an operator may unload.
my $engines = RedisLockTest->start_redis(args => [ '--enable-module-command', 'yes' ]);
SKIP:
{
	skip 'the server has no Lua module to unload (Valkey 9.1 and later have)', 2
	  unless has_lua_module($engines);
	is($engines->command('MODULE', 'UNLOAD', 'lua'), 'OK', 'Valkey\'s Lua module is unloaded');
	$node->safe_psql('postgres', "CREATE SERVER nolua FOREIGN DATA WRAPPER redislock OPTIONS (port '"
		  . $engines->port . "')");
	($ret, $stdout, $stderr) = $node->psql('postgres',
		"SET redislock.server = nolua; SELECT redis_lock_acquire('p')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($stderr, qr/ERROR:  0A000: .*\n(?:.*\n)*HINT:  redislock runs its operations as Lua scripts/,
		'then a lock is refused with 0A000 and a hint naming scripting');
}

$node->stop;
done_testing();
