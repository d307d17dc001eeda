=pod

=head1 NAME

RedisMasters - independent throw-away Redis masters on loopback, for
redislock's Redlock TAP tests

=head1 SYNOPSIS

  use RedisMasters;

  my $masters = RedisMasters->start_masters(3);
  my $endpoints = $masters->endpoints;  # "127.0.0.1:20030, 127.0.0.1:20031, ..."

  $masters->master(0)->kill9;           # RedisLockTest handles
  $masters->master(1)->pause;
  $masters->master(1)->resume;
  $masters->master(0)->restart;         # same port, empty

=head1 DESCRIPTION

N plain Redis servers that know nothing of each other, as Redlock wants
them.  Ports and processes are RedisTopology's: a master restarted gets its
port back.

=cut

package RedisMasters;

use strict;
use warnings;

use parent 'RedisTopology';

use Carp;

=pod

=head1 METHODS

=over

=item RedisMasters->start_masters($n, %opts)

Start C<$n> masters (at most 9).  C<args> gives extra redis-server
arguments, C<password> a password for all of them (C<--requirepass>; one
in C<args> counts too).

=cut

sub start_masters
{
	my ($class, $n, %opts) = @_;
	my ($password, @args) = RedisTopology::auth_options(%opts);
	my $self = bless { password => $password }, $class;
	$self->start_node($_, args => \@args) foreach RedisTopology::reserve_ports($n);
	return $self;
}

=pod

=item $masters->endpoints

The masters as C<"127.0.0.1:PORT, 127.0.0.1:PORT, ...">, the form of a
server's C<redlock> option (RedisTopology's C<endpoints>).

=cut

=pod

=item $masters->master($i)

The RedisLockTest handle of master C<$i> (from 0, in the order of
C<endpoints>): C<port>, C<cli>, C<kill9>, C<stop>, C<restart>, C<pause>,
C<resume>, C<debug_sleep>, C<wake>...

=cut

sub master
{
	my ($self, $i) = @_;
	my $port = ($self->all_ports)[$i] // croak "no master $i";
	return $self->node($port);
}

=pod

=item $masters->count

How many masters there are.

=cut

sub count
{
	my ($self) = @_;
	return scalar $self->all_ports;
}

=pod

=back

=cut

1;
