# shellcheck shell=bash
# Shared bash helpers for test/run and scripts/demo (sourced, not executed).
#
# They give a script its own throw-away Redis and PostgreSQL on free loopback
# ports, inside a fresh work directory, and make sure both are stopped however
# the script ends.  PostgreSQL refuses to run as root, so when the caller is
# root every server and test program runs as the ordinary user "redislock",
# created on first use.
#
# Sourcing this file only defines variables and functions.

RL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The account that servers and tests run as when the caller is root.
RL_TEST_USER=redislock

# PostgreSQL 15's TAP modules (Debian's postgresql-server-dev-15), which the
# TAP tests of older versions run with.
RL_PG15_TAP_MODULES=/usr/lib/postgresql/15/lib/pgxs/src/test/perl

# Set by rl_make_workdir, rl_start_redis and rl_start_pg; rl_cleanup reads them.
RL_WORK=
RL_KEEP_WORK=0
RL_REDIS_DIR=
RL_PG_DATA=

rl_log() {
	printf '==> %s\n' "$*"
}

rl_die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

# Print the pg_config to use: $PG_CONFIG if set, else PostgreSQL 15's (Debian
# puts it outside PATH), else whatever pg_config is in PATH.
rl_find_pg_config() {
	if [[ -n ${PG_CONFIG:-} ]]; then
		printf '%s\n' "$PG_CONFIG"
	elif [[ -x /usr/lib/postgresql/15/bin/pg_config ]]; then
		printf '%s\n' /usr/lib/postgresql/15/bin/pg_config
	else
		command -v pg_config || rl_die "pg_config not found: install postgresql-server-dev-15 (scripts/setup does)"
	fi
}

# Locate the PostgreSQL installation and export the variables the servers
# and test programs need: PG_CONFIG, RL_PG_BINDIR (also put first in PATH)
# and RL_RUN_USER.  REDISLOCK_REDIS_BINDIR, when set, names a directory with
# the Redis-compatible server to test with (redis-server, redis-cli and
# redis-sentinel, or links by those names to Valkey's), put first in PATH.
rl_init_env() {
	PG_CONFIG=$(rl_find_pg_config)
	RL_PG_BINDIR=$("$PG_CONFIG" --bindir)
	export PG_CONFIG RL_PG_BINDIR
	export PATH="$RL_PG_BINDIR:$PATH"
	if [[ -n ${REDISLOCK_REDIS_BINDIR:-} ]]; then
		[[ -x $REDISLOCK_REDIS_BINDIR/redis-server ]] ||
			rl_die "REDISLOCK_REDIS_BINDIR=$REDISLOCK_REDIS_BINDIR has no redis-server"
		export PATH="$REDISLOCK_REDIS_BINDIR:$PATH"
	fi

	command -v redis-server >/dev/null || rl_die "redis-server not found: install redis-server (scripts/setup does)"
	command -v redis-cli >/dev/null || rl_die "redis-cli not found: install redis-tools (scripts/setup does)"

	if ((EUID == 0)); then
		RL_RUN_USER=$RL_TEST_USER
		if ! id -u "$RL_RUN_USER" >/dev/null 2>&1; then
			rl_log "creating user $RL_RUN_USER to run PostgreSQL and Redis"
			useradd --create-home --shell /bin/bash "$RL_RUN_USER"
		fi
	else
		RL_RUN_USER=$(id -un)
	fi
	export RL_RUN_USER
}

# rl_apt_get ARGS...: run apt-get ARGS (as root), non-interactively.  A
# policy-rc.d that forbids starting services keeps the packages' scripts from
# starting PostgreSQL's "main" cluster and Redis on their default ports while
# it runs; an existing policy is left as it is.
rl_apt_get() {
	local policy=/usr/sbin/policy-rc.d status=0
	if [[ -e $policy ]]; then
		DEBIAN_FRONTEND=noninteractive apt-get -q "$@"
		return
	fi
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	DEBIAN_FRONTEND=noninteractive apt-get -q "$@" || status=$?
	rm -f "$policy"
	return "$status"
}

# Run a command as the ordinary user, keeping the environment.  The current
# directory must be readable by that user (scripts cd into the work dir).
rl_as_user() {
	if ((EUID == 0)); then
		runuser -u "$RL_RUN_USER" -- "$@"
	else
		"$@"
	fi
}

# Fail unless the extension (its control file and library) has been
# installed into the PostgreSQL of PG_CONFIG (rl_find_pg_config's by
# default).
rl_check_installed() {
	local file pg_config
	pg_config=${PG_CONFIG:-$(rl_find_pg_config)}
	for file in "$("$pg_config" --sharedir)/extension/redislock.control" \
		"$("$pg_config" --pkglibdir)/redislock.so"; do
		[[ -f $file ]] || rl_die "$file is missing: build and install the extension first" \
			"(scripts/setup), or install its package"
	done
}

# rl_copy_tree DIR: copy the repository into DIR (made if missing), leaving
# out git metadata, earlier test output and build products (which may be
# of another PostgreSQL version).
rl_copy_tree() {
	mkdir -p "$1"
	tar -C "$RL_ROOT" -cf - \
		--exclude=./.git --exclude=./results --exclude=./output_iso \
		--exclude=./tmp_check --exclude=./log \
		--exclude=./regression.diffs --exclude=./regression.out \
		--exclude='*.o' --exclude='*.bc' --exclude='*.so' \
		--exclude=./exports.map \
		. | tar -C "$1" -xf -
}

# Create the work dir (a fresh temporary directory owned by the run user,
# with an empty tmp/ for test programs' temporary files) and cd into it.  As
# root it is made under /tmp, where the run user can reach it whatever root's
# TMPDIR is.  With "copy", also copy the repository into $RL_WORK/src, so
# that make and the test programs can write there.
rl_make_workdir() {
	local base=${TMPDIR:-/tmp}
	((EUID != 0)) || base=/tmp
	RL_WORK=$(mktemp -d "$base/redislock.XXXXXX")
	mkdir "$RL_WORK/tmp"
	if [[ ${1:-} == copy ]]; then
		rl_copy_tree "$RL_WORK/src"
	fi
	if ((EUID == 0)); then
		chown -R "$RL_RUN_USER:" "$RL_WORK"
	fi
	cd "$RL_WORK" || rl_die "cannot enter $RL_WORK"
}

# Print a TCP port on 127.0.0.1 that is free right now.  Start the server that
# takes it before asking for the next one, so the two cannot collide.
rl_free_port() {
	perl -MIO::Socket::INET -e '
		my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0,
		                              Proto => "tcp", Listen => 1)
		  or die "cannot bind a loopback port: $!\n";
		print $s->sockport, "\n";'
}

# rl_start_redis DIR PORT: start a Redis with no persistence, listening on
# 127.0.0.1:PORT only, with its pid file and log in DIR; wait until it
# answers PING.
rl_start_redis() {
	local dir=$1 port=$2 i
	rl_as_user mkdir -p "$dir"
	RL_REDIS_DIR=$dir
	rl_as_user redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" \
		--save '' --appendonly no \
		--daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
	for ((i = 0; i < 100; i++)); do
		if [[ $(redis-cli -p "$port" ping 2>/dev/null) == PONG ]]; then
			echo "$port" >"$dir/port"
			return 0
		fi
		sleep 0.1
	done
	tail -n 20 "$dir/redis.log" >&2 || true
	rl_die "Redis did not start on port $port"
}

# Stop the Redis started by rl_start_redis, if it runs.  Redis removes its pid
# file when it exits; the pid itself cannot be polled because an orphaned
# daemon may linger as a zombie where nothing reaps it.
rl_stop_redis() {
	local dir=$RL_REDIS_DIR i
	[[ -n $dir && -f $dir/redis.pid ]] || return 0
	redis-cli -p "$(cat "$dir/port")" shutdown nosave >/dev/null 2>&1 || true
	for ((i = 0; i < 100; i++)); do
		[[ -f $dir/redis.pid ]] || return 0
		sleep 0.1
	done
	kill -KILL "$(cat "$dir/redis.pid")" 2>/dev/null || true
	rm -f "$dir/redis.pid"
}

# rl_start_pg DIR PORT: initdb a cluster in DIR/data and start it, listening
# on 127.0.0.1:PORT with its unix socket in DIR, with RL_PG_SETTINGS (lines
# of postgresql.conf, e.g. "max_prepared_transactions = 2") if set.  Local (socket) connections
# are trusted: DIR is private to the run user.  TCP logins need a password,
# and no role has one.  Exports PGHOST, PGPORT and PGUSER for clients.
rl_start_pg() {
	local dir=$1 port=$2
	rl_as_user mkdir -p "$dir"
	rl_as_user initdb --pgdata="$dir/data" --auth-local=trust \
		--auth-host=scram-sha-256 --locale=C --encoding=UTF8 --no-sync \
		>"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; rl_die "initdb failed"; }
	rl_as_user tee -a "$dir/data/postgresql.conf" >/dev/null <<-EOF
		listen_addresses = '127.0.0.1'
		port = $port
		unix_socket_directories = '$dir'
		fsync = off
		log_line_prefix = '%m [%p] %q%a '
		${RL_PG_SETTINGS:-}
	EOF
	RL_PG_DATA=$dir/data
	rl_as_user pg_ctl --pgdata="$RL_PG_DATA" --log="$dir/postgresql.log" \
		--wait --timeout=60 start >/dev/null ||
		{ tail -n 20 "$dir/postgresql.log" >&2; rl_die "PostgreSQL did not start"; }
	export PGHOST=$dir PGPORT=$port PGUSER=$RL_RUN_USER
}

# Stop the PostgreSQL started by rl_start_pg, if it runs: fast shutdown,
# then immediate if that does not finish.
rl_stop_pg() {
	[[ -n $RL_PG_DATA && -f $RL_PG_DATA/postmaster.pid ]] || return 0
	rl_as_user pg_ctl --pgdata="$RL_PG_DATA" --mode=fast --wait --timeout=60 stop >/dev/null 2>&1 ||
		rl_as_user pg_ctl --pgdata="$RL_PG_DATA" --mode=immediate --wait stop >/dev/null 2>&1 ||
		true
}

# Stop every server that was started and remove the work dir, unless
# RL_KEEP_WORK=1 asks to keep it for inspection.  Safe to call twice.
rl_cleanup() {
	rl_stop_pg
	rl_stop_redis
	if [[ -n $RL_WORK && -d $RL_WORK ]]; then
		cd /
		if ((RL_KEEP_WORK)); then
			rl_log "work directory kept: $RL_WORK"
		else
			rm -rf "$RL_WORK"
		fi
		RL_WORK=
	fi
}

# rl_trap_exit FUNCTION: run FUNCTION (which should call rl_cleanup) when the
# script exits, including on errors, Ctrl-C and SIGTERM.
rl_trap_exit() {
	trap "$1" EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}
