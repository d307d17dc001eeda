# Every released version of the extension, updated with ALTER EXTENSION
# redislock UPDATE, must equal a fresh install of the newest version: the
# same member objects with the same definitions, owners and privileges
# (including the initial privileges that pg_dump restores).
#
# The versions are those with an install script in sql/.  Each is installed
# into a database of its own and updated, and the oldest is also updated
# one version at a time; pg_dump then describes each database.  A plain
# dump leaves out what belongs to an extension, so the
# dump is taken in --binary-upgrade mode, which writes every member object
# and its privileges out, without its data; the lines that carry OIDs (a
# TOAST table's among them) or a table's frozen transaction IDs (which
# differ between databases by nature)
# and the dump's random \restrict key are left out of the comparison.
use strict;
use warnings;

use File::Basename;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $sqldir = dirname(__FILE__) . '/../../sql';

# Compare two version strings made of dot-separated numbers.
sub version_cmp
{
	my ($x, $y) = @_;
	my @x = split /\./, $x;
	my @y = split /\./, $y;
	while (@x || @y)
	{
		my $c = (shift(@x) // 0) <=> (shift(@y) // 0);
		return $c if $c;
	}
	return 0;
}

# Return the schema of database DB as pg_dump --binary-upgrade writes it,
# without the lines that differ between two identical databases.
sub describe_database
{
	my ($node, $db) = @_;
	my ($stdout, $stderr) = run_command(
		[ $node->installed_command('pg_dump'), '--schema-only', '--binary-upgrade', '--dbname', $node->connstr($db) ]);
	die "pg_dump of $db failed: $stderr" if $stderr ne '';
	return join '', grep { !/^\\(?:un)?restrict |binary_upgrade_set_next_|^SET relfrozenxid = |^WHERE oid = '[0-9]+';$/ }
	  split /^/, $stdout;
}

# Return the unified diff of two texts, empty if they are equal.
sub text_diff
{
	my ($name_a, $a, $name_b, $b) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir('upgrade');
	PostgreSQL::Test::Utils::append_to_file("$dir/$name_a", $a);
	PostgreSQL::Test::Utils::append_to_file("$dir/$name_b", $b);
	my ($diff) = run_command([ 'diff', '-u', "$dir/$name_a", "$dir/$name_b" ]);
	return $diff;
}

my @versions = sort { version_cmp($a, $b) }
  map { m{/redislock--((?:(?!--).)+)\.sql$} ? $1 : () } glob("$sqldir/redislock--*.sql");
ok(@versions > 0, 'sql/ has install scripts: ' . join(', ', @versions));
my $newest = $versions[-1];

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->start;

is( $node->safe_psql(
		'postgres',
		"SELECT default_version FROM pg_available_extensions WHERE name = 'redislock'"),
	$newest,
	"the default version is the newest install script's, $newest");

$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION redislock');
my $fresh = describe_database($node, 'fresh');
like($fresh, qr/^CREATE FUNCTION public\.redis_lock_acquire\(/m,
	'the dump shows the extension\'s member objects');

foreach my $version (@versions[ 0 .. $#versions - 1 ])
{
	my $db = "from_$version" =~ s/\W/_/gr;
	$node->safe_psql('postgres', qq{CREATE DATABASE "$db"});
	$node->safe_psql(
		$db, qq{
		CREATE EXTENSION redislock VERSION '$version';
		ALTER EXTENSION redislock UPDATE;
	});
	is( $node->safe_psql(
			$db, "SELECT extversion FROM pg_extension WHERE extname = 'redislock'"),
		$newest,
		"$version updates to $newest");
	is( text_diff(
			"fresh-$newest.sql", $fresh, "updated-from-$version.sql",
			describe_database($node, $db)),
		'',
		"$version updated to $newest has the objects and privileges of a fresh $newest");
}

# The oldest version updated one version at a time, 1.0 to 1.1 to 1.2 and
# so on, as a server that took every release would have it.
if (@versions > 2)
{
	$node->safe_psql('postgres', 'CREATE DATABASE stepwise');
	$node->safe_psql('stepwise', qq{CREATE EXTENSION redislock VERSION '$versions[0]'});
	$node->safe_psql('stepwise', qq{ALTER EXTENSION redislock UPDATE TO '$_'})
	  foreach @versions[ 1 .. $#versions ];
	is( text_diff(
			"fresh-$newest.sql", $fresh, 'updated-stepwise.sql',
			describe_database($node, 'stepwise')),
		'',
		join(' -> ', @versions) . ", one update at a time, has the objects and privileges of a fresh $newest");
}

$node->stop;

done_testing();
