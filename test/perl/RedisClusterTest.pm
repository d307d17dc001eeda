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
use Test::More;
use RedisLockTest qw(session_query key_slot session works node_with_server);

our @EXPORT_OK = qw(new_cluster_node session works user_key_on);

=pod

=head1 FUNCTIONS

C<session> and C<works> are RedisLockTest's, exported here too.

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

	return node_with_server($name, 'rc', "cluster '$seeds'", %opts);
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
