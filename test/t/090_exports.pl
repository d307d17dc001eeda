# The installed library exports only what PostgreSQL looks up in it:
# _PG_init, Pg_magic_func, the entry points of its background workers, and
# for every C function that an install or update script of the extension
# declares, its link symbol and the pg_finfo_ record of that symbol.
# Everything else is local, so that other modules loaded into the same
# backend can neither bind to our internals nor have theirs taken by ours.
#
# The symbols come from the scripts in sql/ (every version's, so that a
# library serving a database not yet updated still has what it needs); the
# library is the one that the installation in PATH loads.
use strict;
use warnings;

use File::Basename;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $sqldir = dirname(__FILE__) . '/../../sql';

# Return the link symbols of the C functions declared in the given SQL
# script: AS 'MODULE_PATHNAME', 'symbol', or AS 'MODULE_PATHNAME' alone,
# where the symbol is the function's name.
sub c_symbols
{
	my ($file) = @_;
	my $sql = slurp_file($file);
	$sql =~ s/--[^\n]*//g;
	my @symbols;
	while ($sql =~ m{
			CREATE \s+ (?:OR \s+ REPLACE \s+)? FUNCTION \s+
			(?:\w+\.)? (\w+) \s* \(               # the name, unqualified
			(?: (?! CREATE \s ) . )*?             # within that statement
			AS \s+ '(?:MODULE_PATHNAME|\$libdir/redislock)'
			(?: \s* , \s* '(\w+)' )?              # the symbol, if given
		}gsix)
	{
		push @symbols, $2 // $1;
	}
	return @symbols;
}

my @scripts = glob("$sqldir/redislock--*.sql");
ok(@scripts > 0, 'the extension has SQL scripts in sql/');

my %expected = map { $_ => 1 }
  qw(_PG_init Pg_magic_func redislock_launcher_main redislock_worker_main
  redislock_recovery_main);
foreach my $script (@scripts)
{
	$expected{$_} = $expected{"pg_finfo_$_"} = 1 foreach c_symbols($script);
}

my $libdir = PostgreSQL::Test::Cluster->new('exports')->config_data('--pkglibdir');
my $library = "$libdir/redislock.so";
ok(-f $library, "$library is installed");

my ($stdout, $stderr) = run_command([ 'nm', '-D', '--defined-only', $library ]);
is($stderr, '', 'nm reads the library');
my @exported = sort map { (split ' ')[2] // () } split /\n/, $stdout;

is_deeply(\@exported, [ sort keys %expected ],
	'the library exports exactly _PG_init, Pg_magic_func, the workers\' entry points and the SQL functions with their pg_finfo_ records'
);

done_testing();
