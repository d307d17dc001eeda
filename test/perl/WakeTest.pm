=pod

=head1 NAME

WakeTest - what redislock's wake-up TAP tests share: sessions that know
their backend, and the time a release takes to reach a waiter

=head1 SYNOPSIS

  use WakeTest qw(add_server new_session pid_of waits start_timed_wait
    release_at granted_after hand_off median);

  my $holder = new_session($node);
  my $waiter = new_session($node);
  my ($granted, $ms) = hand_off($node, $holder, $waiter, 'hot');

=head1 FUNCTIONS

=over

=cut

package WakeTest;

use strict;
use warnings;

use Exporter 'import';
use Time::HiRes qw(usleep);
use RedisLockTest qw(session session_query start_query finish_query wait_until);

our @EXPORT_OK = qw(add_server new_session pid_of waits start_timed_wait
  release_at granted_after hand_off median);

my %pids;

=pod

=item add_server($node, $server, $port)

In database C<postgres> of C<$node>, a foreign server C<$server> of the
redislock wrapper for the Redis (or the proxy) on 127.0.0.1:C<$port>, with
USAGE granted to PUBLIC.

=cut

sub add_server
{
	my ($node, $server, $port) = @_;
	$node->safe_psql(
		'postgres', qq{
		CREATE SERVER $server FOREIGN DATA WRAPPER redislock
			OPTIONS (host '127.0.0.1', port '$port');
		GRANT USAGE ON FOREIGN SERVER $server TO PUBLIC;
	});
	return;
}

=pod

=item new_session($node, $server)

A background session (RedisLockTest's C<session>) on C<$node>, using
foreign server C<$server> when given; C<pid_of> then tells its backend.

=cut

sub new_session
{
	my ($node, $server) = @_;
	my $s = session($node);
	session_query($s, "SET redislock.server = $server") if $server;
	$pids{"$s"} = (session_query($s, 'SELECT pg_backend_pid()'))[0];
	return $s;
}

=pod

=item pid_of($session)

The backend pid of a session made by C<new_session>.

=cut

sub pid_of
{
	my ($session) = @_;
	return $pids{"$session"};
}

=pod

=item waits($node, $session)

Waits up to 10 s until the session's backend waits on the extension (a
Redis lock, or Redis); returns the seconds it took, or undef.

=cut

sub waits
{
	my ($node, $session) = @_;
	my $pid = pid_of($session);
	return wait_until(
		10,
		sub {
			$node->safe_psql('postgres',
				"SELECT wait_event_type FROM pg_stat_activity WHERE pid = $pid")
			  eq 'Extension';
		});
}

=pod

=item start_timed_wait($session, $key, $function)

Start, in the session, a wait for C<$key> (up to 10 s, for a lease of
30 s) by C<$function>, C<redis_lock_acquire_session> unless given, whose
output tells whether it was granted and when.

=cut

sub start_timed_wait
{
	my ($session, $key, $function) = @_;
	$function //= 'redis_lock_acquire_session';
	start_query($session,
		"SELECT $function('$key', 30000, 10000) AND true, "
		  . "extract(epoch FROM clock_timestamp())");
	return;
}

=pod

=item release_at($holder, $key)

The holder releases C<$key>; returns the time, as its backend's clock tells,
at which the release started.

=cut

sub release_at
{
	my ($holder, $key) = @_;
	my ($released) = session_query($holder,
		"SELECT extract(epoch FROM clock_timestamp()) || '|' || redis_lock_release('$key')");
	my ($t_release) = split /\|/, $released;
	return $t_release;
}

=pod

=item granted_after($session, $t)

The end of a wait started by C<start_timed_wait>: whether it was granted,
and the seconds from C<$t> to the grant.

=cut

sub granted_after
{
	my ($session, $t) = @_;
	my ($out) = finish_query($session, 15);
	my ($granted, $t_grant) = split /\|/, $out;
	return ($granted, $t_grant - $t);
}

=pod

=item hand_off($node, $holder, $waiter, $key)

The holder takes C<$key> (session scope), the waiter waits for it (up to
10 s) for long enough that a backoff would have reached its cap, then the
holder releases it.  C<$node> is the waiter's; the holder may be a session
of another node on the same Redis.  Returns whether the waiter got it, and
the ms from the start of the release to the grant, as the two backends'
clocks tell.  The waiter releases it again.

=cut

sub hand_off
{
	my ($node, $holder, $waiter, $key) = @_;
	session_query($holder, "SELECT redis_lock_acquire_session('$key')");
	start_timed_wait($waiter, $key);
	waits($node, $waiter);
	usleep(300_000);
	my ($granted, $secs) = granted_after($waiter, release_at($holder, $key));
	session_query($waiter, "SELECT redis_lock_release('$key')");
	return ($granted, 1000 * $secs);
}

=pod

=item median(@values)

The median (the upper one of an even number).

=cut

sub median
{
	my @v = sort { $a <=> $b } @_;
	return $v[ int(@v / 2) ];
}

=pod

=back

=cut

1;
