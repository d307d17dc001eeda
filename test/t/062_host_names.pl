# A host name is looked up by SQL calls only, and its addresses are kept:
# a transaction end (COMMIT, ROLLBACK) connects again to the kept addresses
# or fails at once, however long the resolver takes, and a SQL call that
# connects again does not look the name up either.  A SQL call that could
# not connect forgets the addresses, so that the next one looks the name up
# again.
#
# The resolver is the one thing simulated: PostgreSQL runs with a small
# library preloaded (LD_PRELOAD) that answers getaddrinfo() for names under
# ".test" (a top-level domain reserved for testing) from a control file.
# "up" answers 127.0.0.1; "down MS" blocks for MS milliseconds, whatever
# signals arrive, then fails with EAI_AGAIN, as glibc does when its
# nameserver does not answer.  Every other lookup, numeric ones included,
# goes to the C library; a lookup with AI_NUMERICHOST is answered as the C
# library does for a name, EAI_NONAME, without counting it.  Each lookup of
# a name is logged, so that the test counts them.  Nothing leaves loopback.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RedisLockTest qw(session_query wait_until);

my $dir = PostgreSQL::Test::Utils::tempdir();
my $control = "$dir/resolver";
my $lib = "$dir/resolver.so";
PostgreSQL::Test::Utils::append_to_file("$dir/resolver.c", <<'EOC');
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*gai_fn) (const char *, const char *, const struct addrinfo *,
					   struct addrinfo **);

int
getaddrinfo(const char *node, const char *service,
			const struct addrinfo *hints, struct addrinfo **res)
{
	gai_fn		real = (gai_fn) dlsym(RTLD_NEXT, "getaddrinfo");
	const char *control = getenv("TEST_RESOLVER");
	size_t		len = node ? strlen(node) : 0;
	char		mode[16] = "";
	char		logname[1024];
	int			ms = 0;
	FILE	   *f;
	struct timespec until;

	if (control == NULL || len < 5 || strcmp(node + len - 5, ".test") != 0)
		return real(node, service, hints, res);
	if (hints != NULL && (hints->ai_flags & AI_NUMERICHOST))
		return EAI_NONAME;

	snprintf(logname, sizeof(logname), "%s.log", control);
	if ((f = fopen(logname, "a")) != NULL)
	{
		fprintf(f, "%s\n", node);
		fclose(f);
	}
	if ((f = fopen(control, "r")) != NULL)
	{
		if (fscanf(f, "%15s %d", mode, &ms) < 1)
			mode[0] = '\0';
		fclose(f);
	}
	if (strcmp(mode, "up") == 0)
		return real("127.0.0.1", service, hints, res);

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += ms / 1000;
	until.tv_nsec += (long) (ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000)
	{
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
		;
	return EAI_AGAIN;
}
EOC
system('cc', '-shared', '-fPIC', '-o', $lib, "$dir/resolver.c", '-ldl') == 0
  or BAIL_OUT('cannot build the test resolver');

# Tell the resolver how to answer.
sub resolver
{
	my ($mode) = @_;
	open(my $f, '>', $control) or die "cannot write $control: $!";
	print $f "$mode\n";
	close $f;
	return;
}

# The lookups of names made so far.
sub lookups
{
	open(my $f, '<', "$control.log") or return 0;
	my @lines = <$f>;
	close $f;
	return scalar @lines;
}

resolver('up');
my $redis = RedisLockTest->start_redis();
my $port = $redis->port;
my $node = PostgreSQL::Test::Cluster->new('names');
$node->init;
{
	local $ENV{LD_PRELOAD} = $lib;
	local $ENV{TEST_RESOLVER} = $control;
	$node->start;
}
$node->safe_psql(
	'postgres', qq{
	CREATE EXTENSION redislock;
	CREATE SERVER named FOREIGN DATA WRAPPER redislock
		OPTIONS (host 'redis.test', port '$port');
	CREATE USER MAPPING FOR PUBLIC SERVER named;
	GRANT USAGE ON FOREIGN SERVER named TO PUBLIC;
	ALTER DATABASE postgres SET redislock.server = named;
});

my $s = $node->background_psql('postgres', on_error_stop => 0, timeout => 60);
$s->set_query_timer_restart;
session_query($s, '\set VERBOSITY verbose');
session_query($s,
	'SET redislock.connect_timeout = 500; SET redislock.command_timeout = 1000; '
	  . 'SET redislock.verify_before_commit = off');
my ($out, $err, $secs);

# Close every connection of the session on the Redis side.
sub close_connections
{
	$redis->cli('CLIENT', 'KILL', 'TYPE', 'normal');
	return defined wait_until(10, sub { $redis->client_count == 0 });
}

($out, $err) = session_query($s, "SELECT redis_stock_get('none')");
is($err, '', 'a first call connects to redis.test');
is(lookups(), 1, 'after one lookup of the name');

# --- transaction ends connect again without looking the name up
resolver('down 3000');
foreach my $end ('COMMIT', 'ROLLBACK')
{
	session_query($s, 'BEGIN');
	($out) = session_query($s, "SELECT redis_lock_acquire('n_$end', 30000)");
	is($out, 't', "$end: a transaction lock is taken");
	ok(close_connections(), "$end: Redis closed the connection");
	($out, $err, $secs) = session_query($s, $end);
	is($err, '', "$end: connects again without a message, the resolver down");
	cmp_ok($secs, '<', 1.5, "$end: without waiting for the resolver");
	is($redis->cli('EXISTS', "n_$end"), '0', "$end: and releases the lock");
}
is(lookups(), 1, 'no transaction end looked the name up');

# --- nor does a SQL call that connects again
ok(close_connections(), 'Redis closed the connection again');
($out, $err, $secs) = session_query($s, "SELECT redis_stock_get('none')");
is($err, '', 'a SQL call connects again to the kept addresses');
cmp_ok($secs, '<', 1.5, 'without waiting for the resolver');
is(lookups(), 1, 'and without a lookup');

# --- a transaction end that cannot connect fails at once, with a WARNING
session_query($s, 'BEGIN');
($out) = session_query($s, "SELECT redis_lock_acquire('n_down', 30000)");
is($out, 't', 'a transaction lock is taken');
$redis->stop;
($out, $err, $secs) = session_query($s, 'COMMIT');
like($err,
	qr/WARNING:\s+08001: could not connect to Redis server "named"\nDETAIL:  Connection to redis\.test:$port failed/,
	'Redis stopped: COMMIT warns that it could not connect');
cmp_ok($secs, '<', 1.5, 'at once, the resolver down');
is(lookups(), 1, 'without a lookup');

# --- a SQL call that could not connect forgets the addresses
resolver('up');
($out, $err) = session_query($s, "SELECT redis_stock_get('none')");
like($err, qr/ERROR:\s+08001: could not connect to Redis server "named"\nDETAIL:  Connection to redis\.test:$port failed/,
	'Redis stopped: a SQL call fails with 08001');
is(lookups(), 2, 'after looking the name up again, since the kept addresses refused');
$redis->restart;
($out, $err) = session_query($s, "SELECT redis_stock_get('none')");
is($err, '', 'Redis back: the next SQL call connects');
is(lookups(), 3, 'after a lookup, since the last connect failed');

$s->quit;
$node->stop;
$redis->stop;

done_testing();
