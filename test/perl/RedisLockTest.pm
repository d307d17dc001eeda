=pod

=head1 NAME

RedisLockTest - throw-away Redis servers and PostgreSQL nodes for redislock's TAP tests

=head1 SYNOPSIS

  use PostgreSQL::Test::Utils;
  use Test::More;
  use RedisLockTest;

  my $redis = RedisLockTest->start_redis();
  my $node  = RedisLockTest->new_node('main', $redis);

  is($redis->cli('ping'), 'PONG', 'redis answers');
  $node->safe_psql('postgres', "SELECT redis_lock_acquire('k')");

  $redis->kill9;      # crash it
  $redis->restart;    # same port, empty data set

  done_testing();

=head1 DESCRIPTION

Each Redis listens on a free loopback port, keeps no data on disk
(C<--save ''>, C<--appendonly no>), allows C<DEBUG> from loopback (for
C<DEBUG SLEEP>) and writes its log next to the PostgreSQL logs of the test.
It runs as a child of the test script, and every one still running is
stopped when the script ends.

=cut

package RedisLockTest;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use File::Basename;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(usleep);

our @EXPORT_OK = qw(session_query);

# Every Redis started by this script, stopped at END.
my @all_redis;

=pod

=head1 METHODS

=over

=item RedisLockTest->start_redis(%opts)

Start a Redis and wait until it answers PING.  C<args> may give extra
command-line arguments for redis-server, e.g.
C<< args => ['--requirepass', 'secret'] >>, which then also apply to
C<restart>.  When a password is given that way, C<password> should name it
too so that C<cli> and the readiness check can log in.

=cut

sub start_redis
{
	my ($class, %opts) = @_;

	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $testname = basename($0);
	$testname =~ s/\.[^.]+$//;

	my $self = bless {
		port     => $port,
		dir      => PostgreSQL::Test::Utils::tempdir("redis_$port"),
		logfile  => "$PostgreSQL::Test::Utils::log_path/${testname}_redis_$port.log",
		args     => $opts{args} // [],
		password => $opts{password},
		handle   => undef,
	}, $class;

	push @all_redis, $self;
	$self->_launch;
	return $self;
}

=pod

=item $redis->port

The TCP port, on 127.0.0.1.

=cut

sub port
{
	my ($self) = @_;
	return $self->{port};
}

=pod

=item $redis->cli(@args)

Run C<redis-cli -p PORT @args> and return its output (standard output, then
standard error, so that a refused connection can be checked too) with
surrounding white space removed and CRLF line ends (as in C<INFO>) turned
into LF.

=cut

sub cli
{
	my ($self, @args) = @_;
	my ($out, $err) = ('', '');
	my @auth = defined $self->{password} ? ('--no-auth-warning', '-a', $self->{password}) : ();

	IPC::Run::run([ 'redis-cli', '-h', '127.0.0.1', '-p', $self->{port}, @auth, @args ],
		'<', \undef, '>', \$out, '2>', \$err);
	my $result = $out . $err;
	$result =~ s/\r\n/\n/g;
	$result =~ s/^\s+|\s+$//g;
	return $result;
}

=pod

=item $redis->stop

Shut Redis down (SIGTERM) and wait for it to exit.  Does nothing if it is not
running.

=cut

sub stop
{
	my ($self) = @_;
	$self->_end('TERM');
	return;
}

=pod

=item $redis->kill9

Kill Redis with SIGKILL, as a crash would, and wait for it to be gone.

=cut

sub kill9
{
	my ($self) = @_;
	$self->_end('KILL');
	return;
}

=pod

=item $redis->restart

Stop Redis if it runs, start it again on the same port with the same
arguments (its data set is empty, scripts are no longer cached), and wait
until it answers PING.

=cut

sub restart
{
	my ($self) = @_;
	$self->stop;
	$self->_launch;
	return;
}

=pod

=item RedisLockTest->new_node($name, $redis)

Create, initialize and start a PostgreSQL::Test::Cluster node, then in
database C<postgres> create the extension, point its server C<redislock> at
C<$redis> and grant USAGE on that server to PUBLIC.  Returns the node.

=cut

sub new_node
{
	my ($class, $name, $redis) = @_;

	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->start;
	my $port = $redis->port;
	$node->safe_psql(
		'postgres', qq{
		CREATE EXTENSION redislock;
		ALTER SERVER redislock OPTIONS (SET port '$port');
		GRANT USAGE ON FOREIGN SERVER redislock TO PUBLIC;
	});
	return $node;
}

=pod

=back

=cut

=pod

=head2 session_query($session, $sql)

Runs SQL in a background psql session (PostgreSQL::Test::BackgroundPsql)
and returns its output, what it wrote to stderr for this query only, and
the seconds it took.

=cut

sub session_query
{
	my ($session, $sql) = @_;
	$session->{stderr} = '';
	my $t0 = [ Time::HiRes::gettimeofday() ];
	my $out = $session->query($sql);
	return ($out, $session->{stderr},
		Time::HiRes::tv_interval($t0));
}

# Start redis-server in the foreground as our child (so that it is reaped
# when it dies) and wait until it answers PING; die if it exits or does not
# answer within the default test timeout.
sub _launch
{
	my ($self) = @_;
	my @cmd = (
		'redis-server',
		'--bind'                 => '127.0.0.1',
		'--port'                 => $self->{port},
		'--dir'                  => $self->{dir},
		'--save'                 => '',
		'--appendonly'           => 'no',
		'--enable-debug-command' => 'local',
		'--daemonize'            => 'no',
		'--logfile'              => $self->{logfile},
		@{ $self->{args} });

	$self->{handle} = IPC::Run::start(\@cmd, '<', '/dev/null', '>>', $self->{logfile},
		'2>>', $self->{logfile});

	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return if $self->cli('ping') eq 'PONG';
		croak "redis-server exited at start, see $self->{logfile}"
		  unless $self->{handle}->pumpable;
		usleep(100_000);
	}
	croak "redis-server on port $self->{port} did not answer PING, see $self->{logfile}";
}

# Send SIGNAL to Redis if it runs and wait for it to exit.
sub _end
{
	my ($self, $signal) = @_;
	my $handle = $self->{handle} or return;

	$self->{handle} = undef;
	$handle->signal($signal);
	# finish() reports the exit status, which a signalled Redis has non-zero.
	eval { $handle->finish };
	return;
}

END
{
	# Keep the test's exit status: stopping Redis must not change it.
	local $?;
	$_->stop foreach @all_redis;
}

1;
