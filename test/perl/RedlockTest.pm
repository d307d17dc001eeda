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
use Test::More;
use RedisLockTest qw(session_query session works node_with_server);

our @EXPORT_OK = qw(new_redlock_node session works values_on);

=pod

=head1 FUNCTIONS

C<session> and C<works> are RedisLockTest's, exported here too.

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
	my $first = $masters->master(0)->port;

	return node_with_server($name, 'rl', "redlock '${\$masters->endpoints}'",
		before => "ALTER SERVER redislock OPTIONS (SET port '$first');"
		  . ' GRANT USAGE ON FOREIGN SERVER redislock TO PUBLIC;',
		%opts);
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
