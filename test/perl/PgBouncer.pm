=pod

=head1 NAME

PgBouncer - a throw-away PgBouncer in front of a test's PostgreSQL node

=head1 SYNOPSIS

  use PgBouncer;

  my $bouncer = PgBouncer->start($node, pool_size => 4);
  # pgbench ... $bouncer->connstr('postgres')
  my $client = $bouncer->session($node);    # a background psql through it
  $bouncer->stop;

=head1 DESCRIPTION

PgBouncer (see C<program>) listens on a free port of 127.0.0.1, and on no
unix socket, and sends every database of the node, under the same name, to
the node's unix socket.  It pools in transaction mode by default, lets in the node's bootstrap
superuser without a password (C<auth_type = trust>, the user named in an
auth file), and writes its configuration and pid file in a directory of
the test and its log next to the PostgreSQL logs of the test.  It runs as
a child of the test script, and every one still running is stopped when
the script ends.

=cut

package PgBouncer;

use strict;
use warnings;

use Carp;
use File::Basename;
use File::Spec;
use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedisLockTest ();
use Time::HiRes qw(usleep);

# Every PgBouncer started by this script, stopped at END.
my @all_bouncers;

=pod

=head1 METHODS

=over

=item PgBouncer->program

The pgbouncer to run: Debian's C</usr/sbin/pgbouncer>, which is not in an
ordinary user's PATH, else the first in PATH; undef if there is none.

=cut

sub program
{
	foreach my $dir ('/usr/sbin', File::Spec->path)
	{
		return "$dir/pgbouncer" if -x "$dir/pgbouncer";
	}
	return undef;
}

=pod

=item PgBouncer->start($node, %opts)

Start a PgBouncer in front of the running C<$node> and return it once it
accepts connections.  C<pool_size> is the number of server connections
per database and user (C<default_pool_size>, 4 by default), C<pool_mode>
the pooling mode (C<transaction> by default).

=cut

sub start
{
	my ($class, $node, %opts) = @_;

	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $testname = basename($0);
	$testname =~ s/\.[^.]+$//;
	my $dir = PostgreSQL::Test::Utils::tempdir("pgbouncer_$port");

	my $self = bless {
		port    => $port,
		dir     => $dir,
		user    => $node->safe_psql('postgres', 'SELECT current_user'),
		logfile => "$PostgreSQL::Test::Utils::log_path/${testname}_pgbouncer_$port.log",
		handle  => undef,
	}, $class;

	PostgreSQL::Test::Utils::append_to_file("$dir/users.txt", qq{"$self->{user}" ""\n});
	PostgreSQL::Test::Utils::append_to_file(
		"$dir/pgbouncer.ini", join("\n",
			'[databases]',
			'* = host=' . $node->host . ' port=' . $node->port,
			'[pgbouncer]',
			'listen_addr = 127.0.0.1',
			"listen_port = $port",
			'unix_socket_dir =',
			'auth_type = trust',
			"auth_file = $dir/users.txt",
			'pool_mode = ' . ($opts{pool_mode} // 'transaction'),
			'default_pool_size = ' . ($opts{pool_size} // 4),
			"logfile = $self->{logfile}",
			"pidfile = $dir/pgbouncer.pid",
			''));

	push @all_bouncers, $self;
	$self->_launch;
	return $self;
}

=pod

=item $bouncer->port, $bouncer->connstr($dbname)

The TCP port it listens on, on 127.0.0.1, and a libpq connection string for
C<$dbname> through it, as the node's bootstrap superuser (psql's C<-d> and
pgbench's database argument take one).

=cut

sub port
{
	my ($self) = @_;
	return $self->{port};
}

sub connstr
{
	my ($self, $dbname) = @_;
	return "host=127.0.0.1 port=$self->{port} dbname=$dbname user=$self->{user}";
}

=pod

=item $bouncer->session($node)

A background psql session on database C<postgres> through PgBouncer, as
C<RedisLockTest::session> makes one on the node itself (going on after
errors, showing them with their SQLSTATE).

=cut

sub session
{
	my ($self, $node) = @_;
	return RedisLockTest::session($node, $self->connstr('postgres'));
}

=pod

=item $bouncer->stop

Shut PgBouncer down at once (SIGTERM: it closes its client and server
connections) and wait for it to exit.  Does nothing if it is not running.

=cut

sub stop
{
	my ($self) = @_;
	my $handle = $self->{handle} or return;

	$self->{handle} = undef;
	$handle->signal('TERM');
	# finish() reports the exit status, which a signalled PgBouncer may have non-zero.
	eval { $handle->finish };
	return;
}

=pod

=back

=cut

# Start pgbouncer in the foreground as our child, logging only to its log
# file, and wait until it accepts a TCP connection; die if it exits or does
# not listen within the default test timeout.
sub _launch
{
	my ($self) = @_;
	my $program = PgBouncer->program // croak 'pgbouncer is not installed';

	$self->{handle} = IPC::Run::start([ $program, '-q', "$self->{dir}/pgbouncer.ini" ],
		'<', '/dev/null', '>>', $self->{logfile}, '2>>', $self->{logfile});

	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return
		  if IO::Socket::INET->new(
			PeerAddr => '127.0.0.1',
			PeerPort => $self->{port},
			Proto    => 'tcp');
		croak "pgbouncer exited at start, see $self->{logfile}"
		  unless $self->{handle}->pumpable;
		usleep(100_000);
	}
	croak "pgbouncer on port $self->{port} does not listen, see $self->{logfile}";
}

END
{
	# Keep the test's exit status: stopping PgBouncer must not change it.
	local $?;
	$_->stop foreach @all_bouncers;
}

1;
