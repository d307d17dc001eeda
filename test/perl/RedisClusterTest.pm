=pod

=head1 NAME

RedisClusterTest - what redislock's Redis Cluster TAP tests share: a
PostgreSQL node whose server is a cluster, sessions, keys on a chosen master

=head1 SYNOPSIS

  use RedisCluster;
  use RedisClusterTest qw(new_cluster_node session works user_key_on);

  my $cluster = RedisCluster->start_cluster();
  my $node = new_cluster_node('name', $cluster, key_prefix => 'p:');
  my $s = session($node);
  my $key = user_key_on($cluster, ($cluster->masters)[0], 'p:', 'k');
  works($s, "SELECT redis_lock_acquire('$key')", 't', 'a lock on the first master');

=cut

package RedisClusterTest;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use PostgreSQL::Test::Cluster;
use Test::More;
use RedisLockTest qw(session_query key_slot);

our @EXPORT_OK = qw(new_cluster_node session works user_key_on);

=pod

=head1 FUNCTIONS

=over

=item new_cluster_node($name, $cluster, %opts)

Create and start a PostgreSQL node (C<conf> may give lines for
postgresql.conf), create the extension in database C<postgres> and a
server C<rc> on the cluster, with the cluster's nodes as seeds (or
C<seeds>) and C<key_prefix> if given; grant USAGE on it to PUBLIC and make
it the database's C<redislock.server>.  C<sql> is run after that.

=cut

sub new_cluster_node
{
	my ($name, $cluster, %opts) = @_;
	my $seeds = $opts{seeds} // $cluster->seeds;
	my $prefix = defined $opts{key_prefix} ? ", key_prefix '$opts{key_prefix}'" : '';

	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', $opts{conf}) if defined $opts{conf};
	$node->start;
	$node->safe_psql(
		'postgres', qq{
		CREATE EXTENSION redislock;
		CREATE SERVER rc FOREIGN DATA WRAPPER redislock
			OPTIONS (cluster '$seeds'$prefix);
		GRANT USAGE ON FOREIGN SERVER rc TO PUBLIC;
		ALTER DATABASE postgres SET redislock.server = rc;
	});
	$node->safe_psql('postgres', $opts{sql}) if defined $opts{sql};
	return $node;
}

=pod

=item session($node)

A background psql session on database C<postgres> that goes on after
errors and shows them in verbose form (with their SQLSTATE).

=cut

sub session
{
	my ($node) = @_;
	my $session = $node->background_psql('postgres', on_error_stop => 0, timeout => 120);
	$session->set_query_timer_restart;
	session_query($session, '\set VERBOSITY verbose');
	return $session;
}

=pod

=item works($session, $sql, $expected, $name)

Run C<$sql> in the session and check that its output is C<$expected> and
that it raised nothing; returns the output and the errors.

=cut

sub works
{
	my ($session, $sql, $expected, $name) = @_;
	my ($out, $err) = session_query($session, $sql);
	is("$out$err", $expected, $name);
	return ($out, $err);
}

=pod

=item user_key_on($cluster, $port, $prefix, $stem)

The first key C<$stem . 0>, C<$stem . 1>, ... whose Redis key, after
C<$prefix>, the master on C<$port> serves.  C<$stem> may also be a code
reference making the key from the number.

=cut

sub user_key_on
{
	my ($cluster, $port, $prefix, $stem) = @_;
	my $make = ref $stem ? $stem : sub { "$stem$_[0]" };
	my ($master) = grep { $_->{port} == $port } $cluster->nodes;
	croak "no master on port $port" unless $master && @{ $master->{slots} };
	my @ranges = map { my ($lo, $hi) = split /-/; [ $lo, $hi // $lo ] } @{ $master->{slots} };

	for my $n (0 .. 100_000)
	{
		my $key = $make->($n);
		my $slot = key_slot($prefix . $key);
		return $key if grep { $slot >= $_->[0] && $slot <= $_->[1] } @ranges;
	}
	croak "no key for port $port";
}

=pod

=back

=cut

1;
