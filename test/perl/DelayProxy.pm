=pod

=head1 NAME

DelayProxy - a loopback TCP proxy that delays what a server answers

=head1 SYNOPSIS

  use DelayProxy;

  my $proxy = DelayProxy->start($redis->port, 0.3);
  # connect to 127.0.0.1:$proxy->port: every reply comes 0.3 s late
  $proxy->stop;

=head1 DESCRIPTION

A forked child listens on a free loopback port and, for each connection it
accepts, opens one to the target port.  Bytes from the client go through at
once; each chunk read from the target is held back for the given delay
before it is written to the client.  Chunks are delayed independently, so
requests pipelined or sent to several proxies at once cost one delay, not
one each: that makes the number of sequential round trips a client makes
visible in the time it takes.

Start proxies before any PostgreSQL node, so that the child holds nothing
of theirs; it leaves with POSIX::_exit, running no END block of the test.
Every proxy still running is stopped when the test script ends.

=cut

package DelayProxy;

use strict;
use warnings;

use Carp;
use IO::Select;
use IO::Socket::INET;
use POSIX ();
use Time::HiRes qw(time);

# Every proxy started by this script, stopped at END.
my @all_proxies;

=pod

=head1 METHODS

=over

=item DelayProxy->start($target_port, $delay_secs, %opts)

Start a proxy to 127.0.0.1:C<$target_port> and return it once it listens.
C<port> chooses the port it listens on (a free one by default), so that a
proxy stopped can be replaced by another on the same port.
C<hold_requests>, C<< [ qr/.../, $secs ] >>, holds back for C<$secs> each
chunk from a client that matches the pattern, and what the same client
sends after it, so that one request can be kept in flight while others
go through.  The child leaves by itself when the test script is gone.

=cut

sub start
{
	my ($class, $target_port, $delay, %opts) = @_;

	my $listener = IO::Socket::INET->new(
		Listen    => 16,
		LocalAddr => '127.0.0.1',
		LocalPort => $opts{port} // 0,
		Proto     => 'tcp',
		ReuseAddr => 1) or croak "cannot listen: $!";
	my $pid = fork() // croak "cannot fork: $!";
	if ($pid == 0)
	{
		my $status =
		  eval { _serve($listener, $target_port, $delay, $opts{hold_requests}); 0 }
		  // 1;
		POSIX::_exit($status);
	}
	my $self = bless { pid => $pid, port => $listener->sockport }, $class;
	close $listener;
	push @all_proxies, $self;
	return $self;
}

=pod

=item $proxy->port

The port the proxy listens on, on 127.0.0.1.

=cut

sub port
{
	my ($self) = @_;
	return $self->{port};
}

=pod

=item $proxy->stop

Stop the proxy and wait for it to exit; its connections close.

=cut

sub stop
{
	my ($self) = @_;
	my $pid = delete $self->{pid} or return;
	kill 'KILL', $pid;
	waitpid($pid, 0);
	return;
}

=pod

=back

=cut

# The child's loop: accept, forward client bytes at once (unless a chunk
# matches hold_requests), and hand each chunk from the target to the client
# once its delay has passed.
sub _serve
{
	my ($listener, $target_port, $delay, $hold_requests) = @_;
	my ($held_pattern, $hold) = @{ $hold_requests // [] };
	my $select = IO::Select->new($listener);
	my %peer;           # socket => the socket at the other end
	my %client;         # target socket => its client socket
	my %held_until;     # target socket => when its held requests go
	my @due;      # [ time, socket, bytes ], in order for each socket
	my $parent = getppid();

	# Leave when the test script is gone, however it ended.
	while (getppid() == $parent)
	{
		my $wait = 1;
		foreach my $chunk (@due)
		{
			$wait = $chunk->[0] - time() if $chunk->[0] - time() < $wait;
		}
		$wait = 0 if $wait < 0;
		foreach my $sock ($select->can_read($wait))
		{
			if ($sock == $listener)
			{
				my $c = $listener->accept or next;
				my $t = IO::Socket::INET->new(
					PeerAddr => '127.0.0.1',
					PeerPort => $target_port,
					Proto    => 'tcp');
				unless ($t)
				{
					close $c;
					next;
				}
				$peer{$c} = $t;
				$peer{$t} = $c;
				$client{$t} = $c;
				$select->add($c, $t);
				next;
			}
			my $other = $peer{$sock} or next;
			my $n = sysread($sock, my $buf, 65536);
			if (!$n)
			{
				# One side closed: close both, dropping what was held back.
				$select->remove($sock, $other);
				delete @peer{ $sock, $other };
				delete @client{ $sock, $other };
				delete @held_until{ $sock, $other };
				@due = grep { $_->[1] != $sock && $_->[1] != $other } @due;
				close $sock;
				close $other;
			}
			elsif ($client{$sock})
			{
				push @due, [ time() + $delay, $other, $buf ];
			}
			else
			{
				my $until = $held_until{$other} // 0;
				$until = time() + $hold
				  if defined $held_pattern && $buf =~ $held_pattern;
				if ($until > time())
				{
					push @due, [ $until, $other, $buf ];
					$held_until{$other} = $until;
				}
				else
				{
					_write_all($other, $buf);
				}
			}
		}
		my $now = time();
		_write_all($_->[1], $_->[2]) foreach grep { $_->[0] <= $now } @due;
		@due = grep { $_->[0] > $now } @due;
	}
}

# Write all of $buf to a blocking socket; a closed client loses it.
sub _write_all
{
	my ($sock, $buf) = @_;
	while (length $buf)
	{
		my $n = syswrite($sock, $buf) or return;
		substr($buf, 0, $n) = '';
	}
	return;
}

END
{
	local $?;
	$_->stop foreach @all_proxies;
}

1;
