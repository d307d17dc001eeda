=pod

=head1 NAME

RedisTopology - what RedisCluster, RedisSentinel and RedisMasters share:
ports for a group of Redis processes, and the processes themselves

=head1 SYNOPSIS

  package RedisMasters;
  use parent 'RedisTopology';

  my $self  = bless {}, $class;
  my @ports = RedisTopology::reserve_ports(3);
  $self->start_node($_, args => [...]) foreach @ports;
  $self->cli($ports[0], 'PING');

=head1 DESCRIPTION

A topology's processes listen on 127.0.0.1 on ports between 20000 and
22767, so that a Redis Cluster bus port (the port plus 10000) is below
32768 too.  Those ports are outside the kernel's range for outgoing
connections, so a node killed and restarted gets its port back.

Ports come in blocks of ten.  A script owns a block while it holds a
listening socket on the block's last port; the others are for its
processes.  Concurrent scripts, whoever runs them, thus never share a block,
and PostgreSQL::Test::Cluster is also told about every port taken, so that
the PostgreSQL nodes of the same run stay off them.

Each process is a RedisLockTest handle, started without persistence, with
C<DEBUG> allowed from loopback and its log in the test's log directory; it
is stopped when the script ends, even after a die.

=cut

package RedisTopology;

use strict;
use warnings;

use Carp;
use IO::Socket::INET;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedisLockTest qw(wait_until);
use Time::HiRes qw(gettimeofday tv_interval);

use constant {
	FIRST_PORT => 20000,
	LAST_PORT  => 22767,
	BLOCK      => 10,
	BUS_OFFSET => 10000,
};

# The sockets that hold this script's blocks of ports, until it exits.
my @block_locks;

=pod

=head1 FUNCTIONS

=over

=item reserve_ports($count)

Take a free block of ports for this script and return C<$count> of them
(at most 9).  Each one, and the Cluster bus port 10000 above it, could be
bound just now.  The first block tried depends on the process id, so that
scripts started together try different blocks.

=cut

sub reserve_ports
{
	my ($count) = @_;
	croak "a block has at most ${\(BLOCK - 1)} ports" if $count > BLOCK - 1;

	my $blocks = int((LAST_PORT - FIRST_PORT + 1) / BLOCK);
	for my $i (0 .. $blocks - 1)
	{
		my $base = FIRST_PORT + BLOCK * (($$ + $i) % $blocks);
		my @ports = ($base .. $base + $count - 1);
		my $lock = _listen($base + BLOCK - 1) or next;
		next if grep { !_can_bind($_) || !_can_bind($_ + BUS_OFFSET) } @ports;
		next unless _tell_postgres(@ports);
		push @block_locks, $lock;
		return @ports;
	}
	croak "no free block of $count ports between ${\FIRST_PORT} and ${\LAST_PORT}";
}

=pod

=item endpoint_list(@ports)

The string C<"127.0.0.1:PORT, 127.0.0.1:PORT, ...">, as a server option
listing several nodes is written.

=cut

sub endpoint_list
{
	return join ', ', map { "127.0.0.1:$_" } @_;
}

=pod

=item fields($text)

The C<name:value> lines of C<INFO> or C<CLUSTER INFO> output, as a hash
reference.

=cut

sub fields
{
	my ($text) = @_;
	return { map { /^([^:#\s]+):(.*)$/ ? ($1 => $2) : () } split /\r?\n/, $text };
}

=pod

=item wait_for($what, $code, $limit)

Call C<$code> every 20 ms until it returns true and return the seconds it
took; die, naming C<$what>, if it does not within C<$limit> seconds (by
default PostgreSQL::Test::Utils' C<timeout_default>).

=cut

sub wait_for
{
	my ($what, $code, $limit) = @_;
	my $secs = wait_until($limit // $PostgreSQL::Test::Utils::timeout_default, $code);
	croak "timed out waiting for $what" unless defined $secs;
	return $secs;
}

=pod

=back

=head1 METHODS

For the subclasses and the tests using them.  Every method naming a node
takes its port.

=over

=item $topology->start_node($port, %opts)

Start a Redis on C<$port> (one from C<reserve_ports>) with the options of
RedisLockTest's C<start_redis>; the topology's password, unless
C<password> gives another (or undef), is used by C<cli> and C<command>.  Replicas sync from it at once (C<repl-diskless-sync-delay>
0).  Returns the handle.

=cut

sub start_node
{
	my ($self, $port, %opts) = @_;
	my $node = RedisLockTest->start_redis(
		port     => $port,
		password => $self->{password},
		%opts,
		# A replica's first sync, without this, waits 5 s for others.
		args => [ '--repl-diskless-sync-delay', 0, @{ $opts{args} // [] } ]);
	$self->{nodes}{$port} = $node;
	push @{ $self->{ports} }, $port;
	return $node;
}

=pod

=item $topology->command($port, @args)

RedisLockTest's C<command> on a node: one command over a connection of its
own, far cheaper than C<cli>.  An error comes back as its text.

=cut

sub command
{
	my ($self, $port, @args) = @_;
	return $self->node($port)->command(@args);
}

=pod

=item $topology->command_ok($port, @args)

C<command>, dying unless the reply is C<OK> (or starts with it, as
C<REPLICAOF>'s C<OK Already connected...>).

=cut

sub command_ok
{
	my ($self, $port, @args) = @_;
	my $reply = $self->command($port, @args) // 'nil';
	croak "@args on port $port: $reply" unless $reply =~ /^OK\b/;
	return;
}

=pod

=item $topology->command_list($port, @args)

C<command>, dying unless the reply is an array; returns its elements.

=cut

sub command_list
{
	my ($self, $port, @args) = @_;
	my $reply = $self->command($port, @args);
	croak "@args on port $port: " . ($reply // 'nil') unless ref $reply eq 'ARRAY';
	return @$reply;
}

=pod

=item $topology->node($port)

The RedisLockTest handle of a node, for what it offers beyond this class:
C<pause>/C<resume>, C<debug_sleep>/C<wake>, C<client_count>...

=cut

sub node
{
	my ($self, $port) = @_;
	return $self->{nodes}{$port} // croak "no node on port $port";
}

=pod

=item $topology->all_ports

The ports of every node started, in the order they were started.

=cut

sub all_ports
{
	my ($self) = @_;
	return @{ $self->{ports} };
}

=pod

=item $topology->endpoints

Every node as C<"127.0.0.1:PORT, 127.0.0.1:PORT, ...">.

=cut

sub endpoints
{
	my ($self) = @_;
	return endpoint_list($self->all_ports);
}

=pod

=item $topology->cli($port, @args)

C<redis-cli @args> on a node, logged in with the topology's password;
returns the output as RedisLockTest's C<cli> does.

=cut

sub cli
{
	my ($self, $port, @args) = @_;
	return $self->node($port)->cli(@args);
}

=pod

=item $topology->kill9($port), $topology->stop_node($port)

Kill a node with SIGKILL, as a crash would, or stop it with SIGTERM, and
wait until it is gone.  The time is kept for C<seconds_since_down>.

=cut

sub kill9
{
	my ($self, $port) = @_;
	$self->_take_down($port, 'kill9');
	return;
}

sub stop_node
{
	my ($self, $port) = @_;
	$self->_take_down($port, 'stop');
	return;
}

=pod

=item $topology->pause_node($port), $topology->resume_node($port)

Stop a node with SIGSTOP, so that it holds its connections but answers
nothing, and let it go on with SIGCONT.  While paused it counts as down
(C<is_up>, C<seconds_since_down>), so that waiting for a failover does not
wait for it to answer.

=cut

sub pause_node
{
	my ($self, $port) = @_;
	$self->_take_down($port, 'pause');
	return;
}

sub resume_node
{
	my ($self, $port) = @_;
	$self->node($port)->resume;
	delete $self->{down}{$port};
	return;
}

=pod

=item $topology->start_again($port)

Start a node that was killed or stopped again, on the same port with the
same arguments, and wait until it answers PING.  Subclasses' C<restart_node>
also waits until it has its place in the topology again.

=cut

sub start_again
{
	my ($self, $port) = @_;
	$self->node($port)->restart;
	delete $self->{down}{$port};
	return;
}

=pod

=item $topology->is_up($port)

Whether the node runs (it was not killed, stopped or paused since it last
started or resumed).

=cut

sub is_up
{
	my ($self, $port) = @_;
	return !$self->{down}{$port};
}

=pod

=item $topology->up_ports

The ports of the nodes that run, in the order they were started.

=cut

sub up_ports
{
	my ($self) = @_;
	return grep { $self->is_up($_) } $self->all_ports;
}

=pod

=item $topology->seconds_since_down($port)

Seconds since the node was killed or stopped, or undef if it runs.

=cut

sub seconds_since_down
{
	my ($self, $port) = @_;
	my $t0 = $self->{down}{$port} or return undef;
	return tv_interval($t0);
}

=pod

=back

=head2 RedisTopology::auth_options(%opts)

From a topology's options, the password of its data nodes and the arguments
they need: C<< password => 'pw' >> adds C<--requirepass> and C<--masterauth>
to C<args>; without it, a C<--requirepass> given in C<args> is the password.

=cut

sub auth_options
{
	my (%opts) = @_;
	my @args = @{ $opts{args} // [] };
	my $password = $opts{password};

	if (defined $password)
	{
		push @args, '--requirepass', $password, '--masterauth', $password;
	}
	else
	{
		for my $i (0 .. $#args - 1)
		{
			$password = $args[ $i + 1 ] if $args[$i] eq '--requirepass';
		}
	}
	return ($password, @args);
}

# Kill, stop or pause (METHOD of RedisLockTest) the node on PORT, and note
# when it went down.
sub _take_down
{
	my ($self, $port, $method) = @_;
	$self->_going_down($port);
	$self->node($port)->$method;
	$self->{down}{$port} = [gettimeofday];
	return;
}

# Called before a node is killed, stopped or paused, for subclasses to note
# what they need of it.
sub _going_down
{
	return;
}

# A listening socket on 127.0.0.1:PORT, or undef if the port is taken.
sub _listen
{
	my ($port) = @_;
	return IO::Socket::INET->new(
		LocalAddr => '127.0.0.1',
		LocalPort => $port,
		Proto     => 'tcp',
		Listen    => 1,
		ReuseAddr => 1);
}

# Whether a server could listen on 127.0.0.1:PORT now (as Redis does, with
# SO_REUSEADDR, so that a port left in TIME_WAIT counts as free).
sub _can_bind
{
	my ($port) = @_;
	my $sock = _listen($port) or return 0;
	close $sock;
	return 1;
}

# Reserve the ports in PostgreSQL::Test::Cluster's books, as its
# get_free_port does, where this version of it keeps such books; false if
# another live process has one of them.
sub _tell_postgres
{
	my (@ports) = @_;
	my $reserve = PostgreSQL::Test::Cluster->can('_reserve_port') or return 1;
	foreach my $port (@ports)
	{
		return 0 unless $reserve->($port);
	}
	return 1;
}

1;
