=pod

=head1 NAME

RedisSentinel - a throw-away Redis master with replicas under Sentinels, on
loopback, for redislock's TAP tests

=head1 SYNOPSIS

  use RedisSentinel;

  my $group = RedisSentinel->start_sentinel_group(replicas => 2, sentinels => 3);
  my $sentinels = $group->sentinels;    # "127.0.0.1:20023, 127.0.0.1:20024, ..."
  my $master = $group->master_port;     # asked of a Sentinel

  $group->cli($master, 'SET', 'k', 'v');
  my $secs = $group->failover;          # SENTINEL FAILOVER, until done

  $group->kill_master;
  $secs = $group->wait_for_new_master;
  $group->restart_node($master);        # comes back as a replica

  $group->stop_all_replicas;            # WAIT now gets no acknowledgement
  $group->start_replicas;

=head1 DESCRIPTION

C<start_sentinel_group> starts a master, its replicas (C<--replicaof>) and
the Sentinels (Debian's C<redis-sentinel>) watching it, each Sentinel with a
configuration file of its own, which it rewrites as it learns.  It waits
until the replicas are in sync and every Sentinel knows every replica and
every other Sentinel, so that a failover can start at once.  Ports and
processes are RedisTopology's.

=cut

package RedisSentinel;

use strict;
use warnings;

use parent 'RedisTopology';

use Carp;
use List::Util qw(all any first);
use Time::HiRes qw(gettimeofday tv_interval);

=pod

=head1 METHODS

=over

=item RedisSentinel->start_sentinel_group(%opts)

Options: C<replicas> (2), C<sentinels> (3), C<master_name> (C<mymaster>),
C<quorum> (a majority of the Sentinels), C<down_after> and
C<failover_timeout> in ms (1000 and 5000), C<args> for the data nodes'
redis-server, C<password> for the data nodes (C<requirepass> and
C<masterauth>, and C<sentinel auth-pass> for the Sentinels; a
C<--requirepass> in C<args> counts too), and C<sentinel_password>
(C<requirepass> on the Sentinels, and C<sentinel sentinel-pass> for them to
talk to each other).

=cut

sub start_sentinel_group
{
	my ($class, %opts) = @_;
	my $replicas = $opts{replicas} // 2;
	my $sentinels = $opts{sentinels} // 3;
	my ($password, @args) = RedisTopology::auth_options(%opts);
	my $self = bless {
		password    => $password,
		master_name => $opts{master_name} // 'mymaster',
	}, $class;

	my ($master, @ports) = RedisTopology::reserve_ports(1 + $replicas + $sentinels);
	my @replicas = splice @ports, 0, $replicas;
	$self->{data_ports} = [ $master, @replicas ];
	$self->start_node($master, args => \@args);
	$self->start_node($_, args => [ @args, '--replicaof', '127.0.0.1', $master ])
	  foreach @replicas;
	$self->_wait_for_replicas($master, @replicas);

	my $config = $self->_sentinel_config($master, $password, scalar @ports, %opts);
	$self->{sentinel_ports} = \@ports;
	foreach my $port (@ports)
	{
		$self->start_node(
			$port,
			program  => 'redis-sentinel',
			config   => $config,
			password => $opts{sentinel_password});
	}
	RedisTopology::wait_for(
		'the Sentinels to know each other and the replicas',
		sub {
			all {
				my $m = $self->_sentinel_view($_);
				$m->{'num-slaves'} == $replicas
				  && $m->{'num-other-sentinels'} == $sentinels - 1
				  && $m->{flags} eq 'master';
			}
			@ports;
		});
	return $self;
}

=pod

=item $group->sentinels

The Sentinels as C<"127.0.0.1:PORT, 127.0.0.1:PORT, ...">, the form of a
server's C<sentinel> option.

=cut

sub sentinels
{
	my ($self) = @_;
	return RedisTopology::endpoint_list(@{ $self->{sentinel_ports} });
}

=pod

=item $group->sentinel_ports, $group->data_ports

The Sentinels' ports; the data nodes' ports, the first master first.

=cut

sub sentinel_ports
{
	my ($self) = @_;
	return @{ $self->{sentinel_ports} };
}

sub data_ports
{
	my ($self) = @_;
	return @{ $self->{data_ports} };
}

=pod

=item $group->master_name

The name the Sentinels know the master by.

=cut

sub master_name
{
	my ($self) = @_;
	return $self->{master_name};
}

=pod

=item $group->server_options

The options of a redislock server that reaches the master through these
Sentinels: C<sentinel '...', sentinel_master '...'>, for an OPTIONS list.

=cut

sub server_options
{
	my ($self) = @_;
	return sprintf("sentinel '%s', sentinel_master '%s'",
		$self->sentinels, $self->master_name);
}

=pod

=item $group->master_port

The port of the master, as a running Sentinel gives it
(C<SENTINEL get-master-addr-by-name>).

=cut

sub master_port
{
	my ($self) = @_;
	my $sentinel = first { $self->is_up($_) } $self->sentinel_ports;
	return $self->_master_by($sentinel);
}

=pod

=item $group->replica_ports

The ports of the data nodes other than the master, running or not.

=cut

sub replica_ports
{
	my ($self) = @_;
	my $master = $self->master_port;
	return grep { $_ != $master } $self->data_ports;
}

=pod

=item $group->role($port)

What a data node says it is (C<ROLE>): C<master> or C<slave>.

=cut

sub role
{
	my ($self, $port) = @_;
	return ($self->command_list($port, 'ROLE'))[0];
}

=pod

=item $group->failover

Ask a Sentinel for a failover (C<SENTINEL FAILOVER>, again while it answers
that one is in progress or that no replica is fit yet), and wait until
every running Sentinel gives another master and that one says C<ROLE>
master.  Returns the seconds it took.  The old master is still a writable
master then, and stays one until a Sentinel's next C<INFO> of it finds it
out of date (about 10 s here): C<role> tells when it is a replica.

=cut

sub failover
{
	my ($self) = @_;
	my $old = $self->master_port;
	my $t0 = [gettimeofday];
	my $sentinel = first { $self->is_up($_) } $self->sentinel_ports;

	RedisTopology::wait_for(
		'a Sentinel to start a failover',
		sub {
			my $reply = $self->command($sentinel, 'SENTINEL', 'FAILOVER', $self->{master_name});
			return 1 if $reply eq 'OK';
			croak "SENTINEL FAILOVER: $reply" unless $reply =~ /^(INPROG|NOGOODSLAVE)/;
			return 0;
		});
	$self->_wait_for_master_other_than($old);
	return tv_interval($t0);
}

=pod

=item $group->kill_master

Kill the master with SIGKILL; returns its port.

=cut

sub kill_master
{
	my ($self) = @_;
	my $port = $self->master_port;
	$self->kill9($port);
	$self->{killed_master} = $port;
	return $port;
}

=pod

=item $group->wait_for_new_master

After C<kill_master>, wait until every running Sentinel gives another
master and that one says C<ROLE> master.  Returns the seconds since the
kill.

=cut

sub wait_for_new_master
{
	my ($self) = @_;
	my $old = $self->{killed_master} // croak 'no master was killed';
	$self->_wait_for_master_other_than($old);
	return $self->seconds_since_down($old);
}

=pod

=item $group->restart_node($port)

Start a killed or stopped data node again on its port.  Unless the
Sentinels give it as the master, it is made a replica of the master
(C<REPLICAOF>; a former master comes back empty), and this waits until it
is in sync.

=cut

sub restart_node
{
	my ($self, $port) = @_;
	$self->start_again($port);
	my $master = $self->master_port;
	$self->_attach($master, $port) unless $port == $master;
	return;
}

=pod

=item $group->stop_all_replicas

Stop every running replica (SIGTERM) and wait until the master counts none.
Returns their ports.

=cut

sub stop_all_replicas
{
	my ($self) = @_;
	my $master = $self->master_port;
	my @stopped = grep { $self->is_up($_) } $self->replica_ports;
	$self->stop_node($_) foreach @stopped;
	RedisTopology::wait_for('the master to lose its replicas',
		sub { $self->_info($master)->{connected_slaves} == 0 });
	return @stopped;
}

=pod

=item $group->start_replicas

Start every stopped replica again, as C<restart_node> does.

=cut

sub start_replicas
{
	my ($self) = @_;
	my $master = $self->master_port;
	my @down = grep { !$self->is_up($_) } $self->replica_ports;
	$self->start_again($_) foreach @down;
	$self->_attach($master, @down);
	return;
}

=pod

=back

=cut

# Make the data nodes on PORTS replicas of the master on MASTER and wait
# until they are in sync.
sub _attach
{
	my ($self, $master, @ports) = @_;
	$self->command_ok($_, 'REPLICAOF', '127.0.0.1', $master) foreach @ports;
	$self->_wait_for_replicas($master, @ports);
	return;
}

# Wait until the replicas on PORTS have their link to the master on MASTER
# up and the master counts them.
sub _wait_for_replicas
{
	my ($self, $master, @ports) = @_;
	RedisTopology::wait_for(
		"the replicas of port $master to sync",
		sub {
			my $seen = $self->_info($master);
			my %online = map { /port=(\d+),state=online/ ? ($1 => 1) : () }
			  @$seen{ grep { /^slave\d+$/ } keys %$seen };
			return all {
				my $info = $self->_info($_);
				$online{$_}
				  && ($info->{master_port} // 0) == $master
				  && ($info->{master_link_status} // '') eq 'up';
			}
			@ports;
		});
	return;
}

# Wait until every running Sentinel gives the same master, not the one on
# OLD, and that master says it is one.
sub _wait_for_master_other_than
{
	my ($self, $old) = @_;
	RedisTopology::wait_for(
		"a master other than port $old",
		sub {
			my %masters = map { $self->_master_by($_) => 1 }
			  grep { $self->is_up($_) } $self->sentinel_ports;
			my ($new) = keys %masters;
			return keys %masters == 1 && $new != $old && $self->role($new) eq 'master';
		});
	return;
}

# The master's port as the Sentinel on PORT gives it.
sub _master_by
{
	my ($self, $port) = @_;
	return ($self->command_list($port, 'SENTINEL', 'get-master-addr-by-name',
			$self->{master_name}))[1];
}

# What the Sentinel on PORT knows of the master (SENTINEL MASTER), as a hash
# reference.
sub _sentinel_view
{
	my ($self, $port) = @_;
	return { $self->command_list($port, 'SENTINEL', 'MASTER', $self->{master_name}) };
}

# The replication section of the data node on PORT's INFO, as a hash
# reference.
sub _info
{
	my ($self, $port) = @_;
	return RedisTopology::fields($self->command($port, 'INFO', 'replication'));
}

# The configuration file of one of SENTINELS Sentinels watching the master
# on MASTER.
sub _sentinel_config
{
	my ($self, $master, $password, $sentinels, %opts) = @_;
	my $name = $self->{master_name};
	my $quorum = $opts{quorum} // int($sentinels / 2) + 1;
	my $spw = $opts{sentinel_password};

	return join '', map { "$_\n" } (
		'sentinel resolve-hostnames no',
		'sentinel announce-hostnames no',
		'sentinel announce-ip 127.0.0.1',
		"sentinel monitor $name 127.0.0.1 $master $quorum",
		"sentinel down-after-milliseconds $name " . ($opts{down_after} // 1000),
		"sentinel failover-timeout $name " . ($opts{failover_timeout} // 5000),
		"sentinel parallel-syncs $name 1",
		(defined $password ? "sentinel auth-pass $name $password" : ()),
		(defined $spw ? ("requirepass $spw", "sentinel sentinel-pass $spw") : ()));
}

1;
