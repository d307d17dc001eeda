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
use IO::Select;
use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(gettimeofday tv_interval usleep);

our @EXPORT_OK = qw(session_query start_query finish_query wait_for_stderr
  wait_until backend_gone key_slot session works node_with_server
  foreign_attempts crash_restart terminate_backend sleep_for add_server);

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

C<port> chooses the port instead of a free one (the caller makes sure it is
free).  C<program> runs another binary of Redis than C<redis-server>, e.g.
C<redis-sentinel>; C<config>, the text of a configuration file, is written
to the server's directory and passed as the first argument (a Sentinel needs
one it can rewrite), once: a restart keeps what the server rewrote there.

=cut

sub start_redis
{
	my ($class, %opts) = @_;

	my $port = $opts{port} // PostgreSQL::Test::Cluster::get_free_port();
	my $testname = basename($0);
	$testname =~ s/\.[^.]+$//;

	my $self = bless {
		port     => $port,
		dir      => PostgreSQL::Test::Utils::tempdir("redis_$port"),
		logfile  => "$PostgreSQL::Test::Utils::log_path/${testname}_redis_$port.log",
		args     => $opts{args} // [],
		password => $opts{password},
		program  => $opts{program} // 'redis-server',
		handle   => undef,
	}, $class;

	if (defined $opts{config})
	{
		$self->{config} = "$self->{dir}/redis.conf";
		PostgreSQL::Test::Utils::append_to_file($self->{config}, $opts{config});
	}

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

=item $redis->answers($secs)

Whether Redis answers a PING within C<$secs> seconds.  It uses a raw socket,
so that the time a redis-cli process takes to start does not count.

=cut

sub answers
{
	my ($self, $secs) = @_;
	my $sock = IO::Socket::INET->new(
		PeerAddr => '127.0.0.1',
		PeerPort => $self->{port},
		Proto    => 'tcp',
		Timeout  => 1) or return 0;
	$sock->autoflush(1);
	print $sock "PING\r\n";

	# a signal to the script (a child's end) cuts a select short
	my $t0 = [gettimeofday];
	my $answered = 0;
	while (!$answered && tv_interval($t0) < $secs)
	{
		$answered = IO::Select->new($sock)->can_read($secs - tv_interval($t0)) ? 1 : 0;
	}
	close $sock;
	return $answered;
}

=pod

=item $redis->debug_sleep($secs)

Make Redis sleep for C<$secs> seconds (C<DEBUG SLEEP> from a background
redis-cli) and return, once it no longer answers PING, the handle of that
redis-cli for C<wake>.

=cut

sub debug_sleep
{
	my ($self, $secs) = @_;
	my @auth = defined $self->{password} ? ('--no-auth-warning', '-a', $self->{password}) : ();
	my $h = IPC::Run::start(
		[ 'redis-cli', '-h', '127.0.0.1', '-p', $self->{port}, @auth, 'DEBUG', 'SLEEP', $secs ],
		'<', \undef, '>', \my $out, '2>', \my $err);
	for (1 .. 300)
	{
		return $h unless $self->answers(0.2);
		usleep(10_000);
	}
	croak 'Redis did not start sleeping';
}

=pod

=item $redis->wake($handle)

Wait for Redis, put to sleep by C<debug_sleep>, to wake up and answer again.

=cut

sub wake
{
	my ($self, $h) = @_;
	$h->finish;
	croak 'Redis does not answer' unless $self->cli('PING') eq 'PONG';
	return;
}

=pod

=item $redis->pause, $redis->resume

Stop Redis with SIGSTOP, so that it accepts connections (the kernel's
listen backlog does) and receives bytes but answers nothing, and let it go
on with SIGCONT, after which it answers what it received meanwhile.

=cut

sub pause
{
	my ($self) = @_;
	croak 'Redis is not running' unless $self->{handle};
	$self->{handle}->signal('STOP');
	$self->{paused} = 1;
	return;
}

sub resume
{
	my ($self) = @_;
	croak 'Redis is not running' unless $self->{handle};
	$self->{handle}->signal('CONT');
	$self->{paused} = 0;
	return;
}

=pod

=item $redis->client_count

How many clients Redis has connected, not counting the redis-cli that asks.

=cut

sub client_count
{
	my ($self) = @_;
	my $list = $self->cli('CLIENT', 'LIST');
	croak "CLIENT LIST failed: $list" unless $list =~ /^id=/;
	return scalar grep { !/\bcmd=client\|list\b/ } split /\n/, $list;
}

=pod

=item $redis->command(@args)

Send one command over a fresh connection (after C<AUTH> when a password
was given) and return its reply: a status, integer or string as is, an
error as its text (C<ERR ...>), nil as undef, an array as a reference to
the list of its elements.  Much quicker than C<cli>, which starts a
redis-cli: use it where a test asks Redis many times.

=cut

sub command
{
	my ($self, @args) = @_;
	my $sock = IO::Socket::INET->new(
		PeerAddr => '127.0.0.1',
		PeerPort => $self->{port},
		Proto    => 'tcp',
		Timeout  => 10) or croak "cannot connect to Redis: $!";
	my @commands = ([@args]);

	unshift @commands, [ 'AUTH', $self->{password} ] if defined $self->{password};
	print $sock join('', '*', scalar @$_, "\r\n", map { '$' . length($_) . "\r\n$_\r\n" } @$_)
	  foreach @commands;
	my $reply;
	$reply = _read_reply($sock) foreach @commands;
	close $sock;
	return $reply;
}

# Read one RESP2 reply from $sock.
sub _read_reply
{
	my ($sock) = @_;
	my $line = $sock->getline // croak 'Redis closed the connection';
	$line =~ s/\r\n\z//;
	my ($type, $rest) = (substr($line, 0, 1), substr($line, 1));

	return $rest if $type eq '+' || $type eq '-' || $type eq ':';
	if ($type eq '$')
	{
		return undef if $rest < 0;
		my $data = '';
		while (length $data < $rest + 2)
		{
			$sock->read($data, $rest + 2 - length $data, length $data)
			  or croak 'Redis closed the connection';
		}
		return substr($data, 0, $rest);
	}
	croak "unexpected reply from Redis: $line" unless $type eq '*';
	return undef if $rest < 0;
	return [ map { _read_reply($sock) } 1 .. $rest ];
}

=pod

=item $redis->keys($pattern)

The keys of database 0 that match the glob C<$pattern> (every key when it
is omitted), sorted, as C<SCAN> lists them.

=cut

sub keys
{
	my ($self, $pattern) = @_;
	my ($cursor, @keys) = (0);

	do
	{
		my $page = $self->command('SCAN', $cursor, 'MATCH', $pattern // '*', 'COUNT', 1000);
		$cursor = $page->[0];
		push @keys, @{ $page->[1] };
	} while ($cursor ne '0');
	return sort @keys;
}

=pod

=item $redis->sibling($prefix, $kind, $key)

The key that redislock keeps beside C<$prefix$key> for C<$kind> (C<fence>,
C<buyers> or C<ops>), C<$prefix{TAG}:$kind:$key> with a decimal TAG, if
Redis holds one; else undef.

=cut

sub sibling
{
	my ($self, $prefix, $kind, $key) = @_;
	(my $literal = $key) =~ s/([*?\[\]\\])/\\$1/g;
	my @found = grep { /\A\Q$prefix\E\{[0-9]+\}:\Q$kind\E:\Q$key\E\z/s }
	  $self->keys("*:$kind:$literal");
	croak "several $kind siblings of \"$prefix$key\": @found" if @found > 1;
	return $found[0];
}

=pod

=item RedisLockTest->new_node($name, $redis, %opts)

Create, initialize and start a PostgreSQL::Test::Cluster node, then in
database C<postgres> create the extension, point its server C<redislock> at
C<$redis> and grant USAGE on that server to PUBLIC.  C<conf> may give lines
for postgresql.conf, added before the first start.  Returns the node.

=cut

sub new_node
{
	my ($class, $name, $redis, %opts) = @_;

	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', $opts{conf}) if defined $opts{conf};
	$node->start;
	$class->setup_node($node, $redis);
	return $node;
}

=pod

=item RedisLockTest->setup_node($node, $redis)

In database C<postgres> of a running node, create the extension, point its
server C<redislock> at C<$redis> and grant USAGE on that server to PUBLIC.

=cut

sub setup_node
{
	my ($class, $node, $redis) = @_;
	my $port = $redis->port;
	$node->safe_psql(
		'postgres', qq{
		CREATE EXTENSION redislock;
		ALTER SERVER redislock OPTIONS (SET port '$port');
		GRANT USAGE ON FOREIGN SERVER redislock TO PUBLIC;
	});
	return;
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

=pod

=head2 node_with_server($name, $server, $options, %opts)

Create and start a PostgreSQL node (C<conf> may give lines for
postgresql.conf), create the extension in database C<postgres> and a
server C<$server> of the redislock wrapper with C<$options> (what goes in
its OPTIONS list) and C<key_prefix> if given; grant USAGE on it to PUBLIC
and make it the database's C<redislock.server>.  C<before> is SQL run right
after CREATE EXTENSION, C<sql> SQL run at the end.  Returns the node.

=cut

sub node_with_server
{
	my ($name, $server, $options, %opts) = @_;
	my $prefix = defined $opts{key_prefix} ? ", key_prefix '$opts{key_prefix}'" : '';
	my $node = PostgreSQL::Test::Cluster->new($name);

	$node->init;
	$node->append_conf('postgresql.conf', $opts{conf}) if defined $opts{conf};
	$node->start;
	$node->safe_psql('postgres',
		join("\n",
			'CREATE EXTENSION redislock;',
			$opts{before} // '',
			"CREATE SERVER $server FOREIGN DATA WRAPPER redislock OPTIONS ($options$prefix);",
			"GRANT USAGE ON FOREIGN SERVER $server TO PUBLIC;",
			"ALTER DATABASE postgres SET redislock.server = $server;"));
	$node->safe_psql('postgres', $opts{sql}) if defined $opts{sql};
	return $node;
}

=pod

=head2 add_server($node, $server, $options)

In database C<postgres> of a running node, create a server C<$server> of
the redislock wrapper with C<$options> (what goes in its OPTIONS list) and
grant USAGE on it to PUBLIC.

=cut

sub add_server
{
	my ($node, $server, $options) = @_;
	$node->safe_psql('postgres',
		"CREATE SERVER $server FOREIGN DATA WRAPPER redislock OPTIONS ($options);\n"
		  . "GRANT USAGE ON FOREIGN SERVER $server TO PUBLIC;");
	return;
}

=pod

=head2 session($node, $connstr)

A background psql session on database C<postgres> that goes on after
errors and shows them in verbose form (with their SQLSTATE).  C<$connstr>,
if given, is where psql connects instead, such as a connection pooler in
front of the node.

=cut

sub session
{
	my ($node, $connstr) = @_;
	# psql takes the last -d it is given
	my $session = $node->background_psql(
		'postgres',
		on_error_stop => 0,
		timeout       => 120,
		extra_params  => defined $connstr ? [ '-d', $connstr ] : []);
	$session->set_query_timer_restart;
	session_query($session, '\set VERBOSITY verbose');
	return $session;
}

=pod

=head2 works($session, $sql, $expected, $name)

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

=head2 start_query($session, $sql)

Sends SQL to a background psql session without waiting for it to finish.
Several sessions may each have a query running.

=cut

my $marker = 0;

sub start_query
{
	my ($session, $sql) = @_;
	$marker++;
	$session->{rl_marker} = $marker;
	$session->{stdout} = '';
	$session->{stderr} = '';
	$session->{rl_started} = [gettimeofday];
	$session->{stdin} .= "$sql;\n\\echo 'end of query $marker'\n\\warn 'end of query $marker'\n";
	$session->{run}->pump_nb;
	return;
}

=pod

=head2 finish_query($session, $limit)

Waits at most C<$limit> seconds for the query sent by C<start_query> to
finish, and returns its output, its stderr and the seconds waited; dies if
it does not finish in time.

=cut

sub finish_query
{
	my ($session, $limit) = @_;
	my $end = qr/^end of query $session->{rl_marker}\n/m;
	my $t0 = [gettimeofday];
	until ($session->{stdout} =~ $end && $session->{stderr} =~ $end)
	{
		croak "query still running after $limit s" if tv_interval($t0) > $limit;
		$session->{run}->pump_nb;
		usleep(2_000);
	}
	my $secs = tv_interval($t0);
	my ($out, $err) = ($session->{stdout}, $session->{stderr});
	$session->{stdout} = $session->{stderr} = '';
	s/$end//, s/\n\z// for ($out, $err);
	return ($out, $err, $secs);
}

=pod

=head2 wait_for_stderr($session, $re, $limit)

Waits at most C<$limit> seconds, while a query sent by C<start_query> runs,
for its stderr to match C<$re> (psql prints an error as soon as it arrives,
before the backend has finished aborting), and returns the seconds since
the query was sent, or undef if it did not match in time.

=cut

sub wait_for_stderr
{
	my ($session, $re, $limit) = @_;
	my $t0 = [gettimeofday];
	until ($session->{stderr} =~ $re)
	{
		return undef if tv_interval($t0) > $limit;
		$session->{run}->pump_nb;
		usleep(2_000);
	}
	return tv_interval($session->{rl_started});
}

=pod

=head2 wait_until($limit, $code)

Calls C<$code> until it returns true, every 20 ms for at most C<$limit>
seconds; returns the seconds it took, or undef if it never did.

=cut

sub wait_until
{
	my ($limit, $code) = @_;
	my $t0 = [gettimeofday];
	while (1)
	{
		return tv_interval($t0) if $code->();
		return undef if tv_interval($t0) > $limit;
		usleep(20_000);
	}
}

=pod

=head2 foreign_attempts($redis, $key, $seconds)

For C<$seconds>, every 100 ms, tries to take C<$key> on C<$redis> as a
foreign client would (C<SET NX PX>) and looks at its PTTL; returns how many
times the SET got the key or the PTTL was not positive, so 0 while a holder
keeps its lease.

=cut

sub foreign_attempts
{
	my ($redis, $key, $seconds) = @_;
	my $bad = 0;
	my $end = Time::HiRes::time() + $seconds;
	while (Time::HiRes::time() < $end)
	{
		my $set = $redis->command('SET', $key, 'foreign', 'NX', 'PX', '60000');
		$bad++ if defined $set && $set eq 'OK';
		$bad++ if $redis->command('PTTL', $key) <= 0;
		usleep(100_000);
	}
	return $bad;
}

=pod

=head2 backend_gone($session, $pid, $limit)

Waits at most C<$limit> seconds, asking through background psql session
C<$session>, for backend C<$pid> to leave pg_stat_activity; returns the
seconds it took, or undef.

=cut

sub backend_gone
{
	my ($session, $pid, $limit) = @_;
	return wait_until(
		$limit,
		sub {
			(session_query($session,
				"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid"))[0] eq '0';
		});
}

=pod

=head2 sleep_for($secs)

Sleeps C<$secs> seconds, however often a signal to the script (a child's
end, say) cuts a sleep short.

=cut

sub sleep_for
{
	my ($secs) = @_;
	my $t0 = [gettimeofday];
	while ((my $left = $secs - tv_interval($t0)) > 0)
	{
		usleep(int($left * 1_000_000));
	}
	return;
}

=pod

=head2 terminate_backend($node, $pid)

Terminates backend C<$pid> of C<$node> with pg_terminate_backend() and
waits at most 10 seconds for it to leave pg_stat_activity (as the
two-argument form of PostgreSQL 14 and later does).  Returns true once it
has.

=cut

sub terminate_backend
{
	my ($node, $pid) = @_;
	return $node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)") eq 't'
	  && defined wait_until(10,
		sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") eq '0';
		});
}

=pod

=head2 crash_restart($node, $pid)

Kills process C<$pid> of C<$node> with SIGKILL, which makes the postmaster
restart every process, and waits at most 60 seconds for the server to
accept connections again after that restart (not before it, as a query
that came first might).  Returns true once it does.

=cut

sub crash_restart
{
	my ($node, $pid) = @_;
	my $offset = -s $node->logfile;
	kill 'KILL', $pid;
	return defined wait_until(60,
		sub {
			slurp_file($node->logfile, $offset) =~
			  /all server processes terminated; reinitializing.*database system is ready to accept connections/s;
		}) && $node->poll_query_until('postgres', 'SELECT true');
}

=pod

=head2 key_slot($key)

The Redis Cluster hash slot of C<$key>, as the cluster specification
defines it: CRC16 (XMODEM) of the key's hash tag (what lies between its
first C<{> and the first C<}> after it, if not empty), else of the whole
key, modulo 16384.

=cut

sub key_slot
{
	my ($key) = @_;
	my $hashed = ($key =~ /\A[^{]*\{([^}]+)\}/s) ? $1 : $key;
	my $crc = 0;

	foreach my $byte (unpack 'C*', $hashed)
	{
		$crc ^= $byte << 8;
		$crc = ($crc & 0x8000 ? ($crc << 1) ^ 0x1021 : $crc << 1) & 0xffff for 1 .. 8;
	}
	return $crc & 16383;
}

# Start redis-server in the foreground as our child (so that it is reaped
# when it dies) and wait until it answers PING; die if it exits or does not
# answer within the default test timeout.
sub _launch
{
	my ($self) = @_;
	my @cmd = (
		$self->{program},
		$self->{config} // (),
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
		croak "$self->{program} exited at start, see $self->{logfile}"
		  unless $self->{handle}->pumpable;
		usleep(100_000);
	}
	croak "$self->{program} on port $self->{port} did not answer PING, see $self->{logfile}";
}

# Send SIGNAL to Redis if it runs and wait for it to exit.
sub _end
{
	my ($self, $signal) = @_;
	my $handle = $self->{handle} or return;

	$self->{handle} = undef;
	$handle->signal($signal);
	# A stopped Redis acts on the signal once it runs again.
	$handle->signal('CONT') if delete $self->{paused};
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
