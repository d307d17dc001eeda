# The counters of redis_stats() take a slot of a fixed table (1024 servers
# over all databases) at a server's first use.  Dropped servers and
# databases give their slots back:
# - 1100 servers made, used and dropped one after another leave room for
#   the next one, which is counted, and nothing warns;
# - with every slot taken by a live server, using one more warns, once,
#   that it is not counted;
# - dropping a database that took slots makes room again: a server used
#   after that is counted.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query session);

my $redis = RedisLockTest->start_redis();
my $port = $redis->port;
my $node = RedisLockTest->new_node('stats_slots', $redis,
	conf => "shared_preload_libraries = 'redislock'");

# SQL that makes $n servers named $name_1.. and uses each (which gives it
# its counters' slot), one transaction each; drops each after its use if
# $drop.
sub servers_used
{
	my ($name, $n, $drop) = @_;
	my $dropping = $drop ? "EXECUTE format('DROP SERVER %I', s);" : '';
	return qq{
	DO \$\$
	DECLARE s text;
	BEGIN
		FOR i IN 1..$n LOOP
			s := '${name}_' || i;
			EXECUTE format('CREATE SERVER %I FOREIGN DATA WRAPPER redislock OPTIONS (host %L, port %L)',
						   s, '127.0.0.1', '$port');
			PERFORM count(*) FROM redis_server_nodes(s::name);
			$dropping
			COMMIT;
		END LOOP;
	END
	\$\$;
	};
}

# Make server $name, use it for a Redis call, and tell whether
# redis_stats() counted that call.
sub counted
{
	my ($session, $name) = @_;
	session_query($session,
		"CREATE SERVER $name FOREIGN DATA WRAPPER redislock OPTIONS (host '127.0.0.1', port '$port')"
	);
	session_query($session, "SET redislock.server = $name");
	session_query($session, "SELECT redis_stock_get('slots')");
	my ($out) = session_query($session,
		"SELECT calls > 0 FROM redis_stats() WHERE server = '$name'");
	return $out;
}

my $s = session($node);

# --- servers made, used and dropped give their slots back
my ($out, $err) = session_query($s, servers_used('gone', 1100, 1));
is($err, '', '1100 servers made, used and dropped, without a warning');
is(counted($s, 'after_drops'), 't', 'the next server used is counted');

# --- every slot taken: one warning; a dropped database gives its slots back
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION redislock');
$node->safe_psql('other', servers_used('there', 30, 0));
($out, $err) = session_query($s, servers_used('live', 1000, 0));
my @warnings = $err =~ /WARNING:\s+53400: redislock cannot count the use of more than 1024 foreign servers/g;
is(scalar @warnings, 1, 'every slot taken by a live server: one warning says so');
like($err, qr/DETAIL:  redis_stats\(\) shows zeros for foreign server "live_\d+"/,
	'naming the server not counted');
is(counted($s, 'not_counted'), 'f', 'a server used then is not counted');
$node->safe_psql('postgres', 'DROP DATABASE other');
is(counted($s, 'after_dropdb'), 't',
	'after DROP DATABASE of a database that took slots, the next server is counted');

$s->quit;
$node->stop;
$redis->stop;

done_testing();
