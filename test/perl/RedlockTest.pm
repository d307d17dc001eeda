=pod

=head1 NAME

RedlockTest - what redislock's Redlock TAP tests share: a PostgreSQL node
whose server is a Redlock quorum of independent masters, sessions, and the
lock key as each master holds it

=head1 SYNOPSIS

  use RedisMasters;
  use RedlockTest qw(new_redlock_node session works values_on);

  my $masters = RedisMasters->start_masters(3);
  my $node = new_redlock_node('name', $masters, key_prefix => 'app:');
  my $s = session($node);
  works($s, "SELECT redis_lock_acquire_session('k')", 't', 'a Redlock lock');
  my @tokens = values_on($masters, 'app:k');   # GET on each master

=cut

package RedlockTest;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use Test::More;
use RedisLockTest qw(session_query);

our @EXPORT_OK = qw(new_redlock_node session works values_on);

=pod

=head1 FUNCTIONS

=over

=item new_redlock_node($name, $masters, %opts)

Create and start a PostgreSQL node (C<conf> may give lines for
postgresql.conf), create the extension in database C<postgres>, point its
server C<redislock> at the first master (so that nothing reaches for a
Redis of the machine's own) and create a server C<rl> whose C<redlock>
option lists the masters, with C<key_prefix> if given; grant USAGE on both
to PUBLIC and make C<rl> the database's C<redislock.server>.  C<sql> is run
after that.

=cut

sub new_redlock_node
{
	my ($name, $masters, %opts) = @_;
	my $prefix = defined $opts{key_prefix} ? ", key_prefix '$opts{key_prefix}'" : '';
	my $first = $masters->master(0)->port;

	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', $opts{conf}) if defined $opts{conf};
	$node->start;
	$node->safe_psql(
		'postgres', qq{
		CREATE EXTENSION redislock;
		ALTER SERVER redislock OPTIONS (SET port '$first');
		CREATE SERVER rl FOREIGN DATA WRAPPER redislock
			OPTIONS (redlock '${\$masters->endpoints}'$prefix);
		GRANT USAGE ON FOREIGN SERVER redislock, rl TO PUBLIC;
		ALTER DATABASE postgres SET redislock.server = rl;
	});
	$node->safe_psql('postgres', $opts{sql}) if defined $opts{sql};
	return $node;
}

=pod

=item session($node)

A background psql session on database C<postgres> that goes on after
errors and shows them in verbose form (with their SQLSTATE).

=cut

sub session
{
	my ($node) = @_;
	my $session = $node->background_psql('postgres', on_error_stop => 0, timeout => 120);
	$session->set_query_timer_restart;
	session_query($session, '\set VERBOSITY verbose');
	return $session;
}

=pod

=item works($session, $sql, $expected, $name)

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

=item values_on($masters, $key)

What each master holds at C<$key> (C<GET>), in the order of the masters,
C<nil> where it holds nothing and C<down> where it does not answer.

=cut

sub values_on
{
	my ($masters, $key) = @_;
	return map {
		my $master = $masters->master($_);
		$master->answers(0.5) ? $master->command('GET', $key) // 'nil' : 'down';
	} 0 .. $masters->count - 1;
}

=pod

=back

=cut

1;
