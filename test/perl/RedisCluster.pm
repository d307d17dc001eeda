=pod

=head1 NAME

RedisCluster - a throw-away Redis Cluster on loopback for redislock's TAP tests

=head1 SYNOPSIS

  use RedisCluster;

  my $cluster = RedisCluster->start_cluster(masters => 3, replicas => 1);
  my $seeds = $cluster->seeds;          # "127.0.0.1:20010, 127.0.0.1:20011, ..."

  $cluster->cli_key('k', 'SET', 'k', 'v');
  my $master = $cluster->master_for_key('k');
  $cluster->cli($master, 'WAIT', 1, 1000);

  $cluster->kill_master($master);
  my $secs = $cluster->wait_for_failover($master);
  $cluster->restart_node($master);      # comes back as a replica

  $cluster->migrate_slot($cluster->keyslot('k'), $from, $to);

=head1 DESCRIPTION

C<start_cluster> starts C<masters * (1 + replicas)> nodes with
C<--cluster-enabled yes>, joins them with C<redis-cli --cluster create> and
waits until every node says C<cluster_state:ok> and all of them agree on
who serves which slots.  Each node keeps its C<nodes.conf> in its own
directory, so a node restarted on its port rejoins the cluster it was in.
Ports and processes are RedisTopology's.

=cut

package RedisCluster;

use strict;
use warnings;

use parent 'RedisTopology';

use Carp;
use IPC::Run;
use List::Util qw(any first);
use RedisLockTest qw(key_slot);
use Time::HiRes qw(gettimeofday tv_interval);

use constant SLOTS => 16384;

# How many keys one MIGRATE moves.
use constant MIGRATE_BATCH => 100;

=pod

=head1 METHODS

=over

=item RedisCluster->start_cluster(%opts)

Start a cluster and wait until it serves every slot.  Options:
C<masters> (3), C<replicas> per master (1), C<node_timeout> in ms (1000,
so that a failover takes a second or two), C<args> for every redis-server,
and C<password> (adds C<--requirepass> and C<--masterauth>; a
C<--requirepass> in C<args> is taken as the password too).

=cut

sub start_cluster
{
	my ($class, %opts) = @_;
	my $masters = $opts{masters} // 3;
	my $replicas = $opts{replicas} // 1;
	my ($password, @args) = RedisTopology::auth_options(%opts);
	my $self = bless { password => $password }, $class;

	foreach my $port (RedisTopology::reserve_ports($masters * (1 + $replicas)))
	{
		$self->start_node(
			$port,
			args => [
				'--cluster-enabled'      => 'yes',
				'--cluster-config-file'  => 'nodes.conf',
				'--cluster-node-timeout' => $opts{node_timeout} // 1000,
				@args
			]);
	}

	my $out = $self->_redis_cli('--cluster', 'create',
		(map { "127.0.0.1:$_" } $self->all_ports),
		'--cluster-replicas', $replicas, '--cluster-yes');
	croak "redis-cli --cluster create failed:\n$out"
	  unless $out =~ /All ${\SLOTS} slots covered/;
	$self->wait_until_settled;
	return $self;
}

=pod

=item $cluster->seeds

Every node as C<"127.0.0.1:PORT, 127.0.0.1:PORT, ...">, the form of a
server's C<cluster> option.

=cut

sub seeds
{
	my ($self) = @_;
	return $self->endpoints;
}

=pod

=item $cluster->nodes

The nodes as a running node sees them (C<CLUSTER NODES>), ordered by port:
hash references with C<port>, C<id>, C<role> (C<master> or C<replica>),
C<master_port> (a replica's master), C<slots> (a master's ranges, e.g.
C<['0-5460']>), C<flags> (e.g. C<master,fail>) and C<up> (whether the
harness has it running).

=cut

sub nodes
{
	my ($self) = @_;
	return $self->_view(first { $self->is_up($_) } $self->all_ports);
}

=pod

=item $cluster->masters

The ports of the masters serving slots, ordered by their first slot.

=cut

sub masters
{
	my ($self) = @_;
	my @masters = grep { @{ $_->{slots} } } $self->nodes;
	return map { $_->{port} } sort { _first_slot($a) <=> _first_slot($b) } @masters;
}

=pod

=item $cluster->replicas_of($port)

The ports of the replicas of the master on C<$port>.

=cut

sub replicas_of
{
	my ($self, $port) = @_;
	return map { $_->{port} } grep { ($_->{master_port} // 0) == $port } $self->nodes;
}

=pod

=item $cluster->keyslot($key)

The hash slot of a key, as the cluster computes it (C<CLUSTER KEYSLOT>).

=cut

sub keyslot
{
	my ($self, $key) = @_;
	my $port = first { $self->is_up($_) } $self->all_ports;
	my $slot = $self->command($port, 'CLUSTER', 'KEYSLOT', $key);
	croak "CLUSTER KEYSLOT on port $port: $slot" unless $slot =~ /^\d+$/;
	return $slot;
}

=pod

=item $cluster->master_for_key($key)

The port of the master serving the key's slot, as a running node sees it.

=cut

sub master_for_key
{
	my ($self, $key) = @_;
	return $self->slot_owner($self->keyslot($key));
}

=pod

=item $cluster->slot_owner($slot)

The port of the master serving a slot, as a running node sees it.

=cut

sub slot_owner
{
	my ($self, $slot) = @_;
	my $owner = first { _serves($_, $slot) } $self->nodes;
	croak "no node serves slot $slot" unless $owner;
	return $owner->{port};
}

=pod

=item $cluster->key_for_master($port, $prefix)

The first of C<$prefix . 0>, C<$prefix . 1>, ... whose slot (computed here
by RedisLockTest's C<key_slot>) the master on C<$port> serves.

=cut

sub key_for_master
{
	my ($self, $port, $prefix) = @_;
	my ($master) = grep { $_->{port} == $port } $self->nodes;
	croak "no master on port $port" unless $master && @{ $master->{slots} };
	for my $n (0 .. 100_000)
	{
		return "$prefix$n" if _serves($master, key_slot("$prefix$n"));
	}
	croak "no key with prefix $prefix on port $port";
}

=pod

=item $cluster->cli_key($key, @args)

C<redis-cli -c @args> on the master serving the key: redirections are
followed, as a cluster client would.

=cut

sub cli_key
{
	my ($self, $key, @args) = @_;
	return $self->cli($self->master_for_key($key), '-c', @args);
}

=pod

=item $cluster->kill_master($port), $cluster->kill9($port)

Kill a node (a master, for C<kill_master>) with SIGKILL.  Like C<stop_node>
and C<pause_node>, it notes which slots the node served, for
C<wait_for_failover>.

=cut

sub kill_master
{
	my ($self, $port) = @_;
	croak "port $port is not a master" unless any { $_ == $port } $self->masters;
	$self->kill9($port);
	return;
}

# Note which slots the node on PORT serves, for wait_for_failover.
sub _going_down
{
	my ($self, $port) = @_;
	my ($node) = grep { $_->{port} == $port } $self->nodes;
	$self->{lost_slots}{$port} = $node->{slots};
	return;
}

=pod

=item $cluster->wait_for_failover($old_master_port)

Wait until another master serves the slots of the killed (or stopped, or
paused) master and every running node agrees and says C<cluster_state:ok>.
Returns the seconds since the master went down (since the call, for a
master not stopped or paused through this class).

=cut

sub wait_for_failover
{
	my ($self, $old) = @_;
	my $t0 = [gettimeofday];
	my $before = $self->seconds_since_down($old) // 0;
	my $slots = $self->{lost_slots}{$old}
	  // (first { $_->{port} == $old } $self->nodes)->{slots};
	my ($slot) = $slots->[0] =~ /^(\d+)/ or croak "port $old served no slot";

	RedisTopology::wait_for(
		"a replica of port $old to take over",
		sub {
			my $owner = first { _serves($_, $slot) } $self->nodes;
			return $owner->{port} != $old && $owner->{up} && $self->settled;
		});
	return $before + tv_interval($t0);
}

=pod

=item $cluster->restart_node($port)

Start a killed or stopped node again on its port: it rejoins with its
C<nodes.conf> (a former master as a replica of the one that took over).
Waits until the cluster has settled with it.

=cut

sub restart_node
{
	my ($self, $port) = @_;
	$self->start_again($port);
	$self->wait_until_settled;
	return;
}

=pod

=item $cluster->migrate_slot($slot, $from_port, $to_port)

Move a slot and its keys from one master to another, as the cluster
specification describes: C<CLUSTER SETSLOT slot IMPORTING> on the target,
C<MIGRATING> on the source, C<MIGRATE> of the keys in batches that
C<CLUSTER GETKEYSINSLOT> lists, then C<SETSLOT slot NODE> on the target, the
source and the other masters.  Waits until every node agrees.

=cut

sub migrate_slot
{
	my ($self, $slot, $from, $to) = @_;
	$self->begin_migration($slot, $from, $to);
	$self->finish_migration($slot, $from, $to);
	return;
}

=pod

=item $cluster->begin_migration($slot, $from_port, $to_port)

The first half of C<migrate_slot>: the slot is marked importing and
migrating, no key has moved.  The source then answers C<-ASK> for the
slot's keys it does not have.

=cut

sub begin_migration
{
	my ($self, $slot, $from, $to) = @_;
	$self->_setslot($to, $slot, 'IMPORTING', $self->_id($from));
	$self->_setslot($from, $slot, 'MIGRATING', $self->_id($to));
	return;
}

=pod

=item $cluster->migrate_keys($slot, $from_port, $to_port, $count)

Move up to C<$count> keys (all when undef) of a slot being migrated to the
target with C<MIGRATE>; returns how many moved.

=cut

sub migrate_keys
{
	my ($self, $slot, $from, $to, $count) = @_;
	my @auth = defined $self->{password} ? ('AUTH', $self->{password}) : ();
	my $moved = 0;

	while (!defined $count || $moved < $count)
	{
		my $batch = defined $count ? $count - $moved : MIGRATE_BATCH;
		$batch = MIGRATE_BATCH if $batch > MIGRATE_BATCH;
		my @keys = $self->command_list($from, 'CLUSTER', 'GETKEYSINSLOT', $slot, $batch);
		last unless @keys;
		$self->command_ok($from, 'MIGRATE', '127.0.0.1', $to, '', 0, 5000,
			@auth, 'KEYS', @keys);
		$moved += @keys;
	}
	return $moved;
}

=pod

=item $cluster->finish_migration($slot, $from_port, $to_port)

The second half of C<migrate_slot>: move the keys left, give the slot to
the target on every master, and wait until every node agrees.

=cut

sub finish_migration
{
	my ($self, $slot, $from, $to) = @_;
	$self->migrate_keys($slot, $from, $to);
	my $id = $self->_id($to);
	foreach my $port ($to, $from, grep { $_ != $to && $_ != $from } $self->masters)
	{
		$self->_setslot($port, $slot, 'NODE', $id) if $self->is_up($port);
	}
	$self->wait_until_settled;
	return;
}

=pod

=item $cluster->settled

Whether every running node says C<cluster_state:ok>, sees every other
running node as healthy, agrees with the others on every node's role,
master and slots, and, if a replica, has its link to its master up.

=cut

sub settled
{
	my ($self) = @_;
	# A node that cannot answer (yet) is not settled.
	return eval { $self->_settled } // 0;
}

sub _settled
{
	my ($self) = @_;
	my $agreed;
	foreach my $port ($self->up_ports)
	{
		my $info = RedisTopology::fields($self->command($port, 'CLUSTER', 'INFO'));
		return 0 unless ($info->{cluster_state} // '') eq 'ok';

		my @view = $self->_view($port);
		return 0 if any { $_->{up} && $_->{flags} =~ /fail|handshake|noaddr/ } @view;
		my $map = join ' ',
		  map { "$_->{port}:$_->{role}:" . ($_->{master_port} // '') . ":@{$_->{slots}}" } @view;
		$agreed //= $map;
		return 0 unless $map eq $agreed;

		my ($me) = grep { $_->{flags} =~ /myself/ } @view;
		next unless $me->{role} eq 'replica';
		my $repl = RedisTopology::fields($self->command($port, 'INFO', 'replication'));
		return 0 unless ($repl->{master_link_status} // '') eq 'up';
	}
	return 1;
}

=pod

=item $cluster->wait_until_settled

Wait until C<settled> is true.

=cut

sub wait_until_settled
{
	my ($self) = @_;
	RedisTopology::wait_for('the cluster to settle', sub { $self->settled });
	return;
}

=pod

=back

=cut

# The nodes as the node on PORT sees them (see nodes()).
sub _view
{
	my ($self, $port) = @_;
	my $text = $self->command($port, 'CLUSTER', 'NODES');
	my (%port_of, @nodes);

	foreach my $line (split /\n/, $text)
	{
		my ($id, $addr, $flags, $master, @rest) = split / /, $line;
		my ($node_port) = ($addr // '') =~ /:(\d+)@/
		  or croak "unexpected CLUSTER NODES line from port $port: $line";
		$port_of{$id} = $node_port;
		push @nodes,
		  {
			id     => $id,
			port   => $node_port,
			flags  => $flags,
			role   => $flags =~ /master/ ? 'master' : 'replica',
			master => $master,
			# Slot numbers and ranges; [slot->-id] entries are migrations.
			slots => [ grep { /^\d/ } @rest[ 4 .. $#rest ] ],
			up    => $self->is_up($node_port),
		  };
	}
	foreach my $node (@nodes)
	{
		$node->{master_port} = $port_of{ delete $node->{master} };
	}
	return sort { $a->{port} <=> $b->{port} } @nodes;
}

# Whether NODE (from _view) serves SLOT.
sub _serves
{
	my ($node, $slot) = @_;
	return any {
		my ($lo, $hi) = split /-/;
		$slot >= $lo && $slot <= ($hi // $lo);
	}
	@{ $node->{slots} };
}

# The first slot that NODE (from _view) serves.
sub _first_slot
{
	my ($node) = @_;
	return ($node->{slots}[0] =~ /^(\d+)/)[0];
}

# The cluster node id of the node on PORT.
sub _id
{
	my ($self, $port) = @_;
	my $id = $self->command($port, 'CLUSTER', 'MYID');
	croak "CLUSTER MYID on port $port: $id" unless $id =~ /^[0-9a-f]{40}$/;
	return $id;
}

# CLUSTER SETSLOT SLOT ARGS on the node on PORT.
sub _setslot
{
	my ($self, $port, $slot, @args) = @_;
	$self->command_ok($port, 'CLUSTER', 'SETSLOT', $slot, @args);
	return;
}

# Run redis-cli with ARGS and the cluster's password, outside of any node
# (for --cluster commands); returns stdout and stderr together.
sub _redis_cli
{
	my ($self, @args) = @_;
	my @auth = defined $self->{password} ? ('--no-auth-warning', '-a', $self->{password}) : ();
	IPC::Run::run([ 'redis-cli', @auth, @args ], '<', \undef, '>&', \my $out);
	return $out;
}

1;
