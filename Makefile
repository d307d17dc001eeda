EXTENSION = redislock
EXTVERSION = 1.3

MODULE_big = redislock
OBJS = src/redislock.o src/guc.o src/compat.o src/keys.o src/scripts.o \
	src/stockscripts.o src/stats.o src/xact.o \
	src/io/resp.o src/io/node.o src/io/socket.o src/io/addressbook.o \
	src/io/call.o src/io/pubsub.o \
	src/server/option.o src/server/connection.o src/server/registry.o \
	src/server/topology.o src/server/cluster.o src/server/sentinel.o \
	src/server/redlock.o \
	src/calls/run.o src/calls/connect.o src/calls/batch.o \
	src/calls/cleanup.o \
	src/lock/held.o src/lock/lease.o src/lock/acquire.o \
	src/lock/lockfuncs.o src/lock/lockview.o src/lock/lockend.o \
	src/lock/locktable.o src/lock/wake.o \
	src/stock/stock.o src/stock/decisions.o src/stock/recover.o \
	src/worker/request.o src/worker/launcher.o src/worker/dbworker.o \
	src/worker/watchdog.o src/worker/waker.o src/worker/recoverer.o
SHLIB_LINK = -lhiredis

DATA = sql/redislock--1.0.sql sql/redislock--1.1.sql sql/redislock--1.2.sql \
	sql/redislock--1.3.sql \
	sql/redislock--1.0--1.1.sql sql/redislock--1.1--1.2.sql \
	sql/redislock--1.2--1.3.sql

# Regression tests: test/sql/*.sql, test/expected/*.out.  Isolation specs:
# test/specs/*.spec, test/expected/*.out (see "Test conventions" below).
# sql/ holds only the extension's install and update scripts (DATA).
REGRESS = setup fdw_options errors locks lock_sets lock_shared semaphores stacking transactions stock \
	binary_keys privileges seckill_example connections

ISOLATION = lock_wait lock_rollback lock_set_wait lock_shared_wait semaphore_wait savepoint_release stock_no_oversell \
	stock_buyer

# Export only what PostgreSQL looks up in the library: _PG_init,
# Pg_magic_func, the entry points of the background workers (BGW_ENTRIES),
# and each SQL-callable function X with its pg_finfo_X.  The list is made
# from the objects at link time (every pg_finfo_X defined by
# PG_FUNCTION_INFO_V1 names an X), so a new SQL function needs nothing here,
# and internal helpers stay local whatever their names.
BGW_ENTRIES = redislock_launcher_main redislock_worker_main \
	redislock_recovery_main
SHLIB_LINK += -Wl,--version-script=exports.map
EXTRA_CLEAN += exports.map tmp_check

# Test conventions.  "make installcheck" runs the regression and isolation
# suites against a running PostgreSQL (the usual PG* variables) and a running
# Redis at REDIS_HOST:REDIS_PORT; test/installcheck-prep checks that Redis
# answers and makes the isolation database, pointed at it, beforehand (the
# specs cannot read the environment), so pg_isolation_regress uses that one.
# Both suites take test/ as input directory: pg_regress reads sql/ and
# expected/ there, pg_isolation_regress specs/ and expected/; their results
# and regression.diffs go to the top level and to output_iso/.
REDIS_HOST ?= 127.0.0.1
export REDIS_HOST REDIS_PORT
REGRESS_PREP = installcheck-prep
REGRESS_OPTS = --inputdir=$(srcdir)/test
ISOLATION_OPTS = --use-existing --inputdir=$(srcdir)/test

# The headers: one a subsystem, each in its folder
PG_CPPFLAGS = -I$(srcdir)/src

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# every object depends on the headers
$(OBJS): $(wildcard $(srcdir)/src/*.h $(srcdir)/src/*/*.h)

# the version script that SHLIB_LINK names (see above)
exports.map: $(OBJS)
	{ echo '{ global: _PG_init; Pg_magic_func;'; \
	  printf '  %s;\n' $(BGW_ENTRIES); \
	  nm --defined-only $(OBJS) | sed -n 's/^[0-9a-f]* T pg_finfo_\(.*\)$$/  \1; pg_finfo_\1;/p' | sort -u; \
	  echo 'local: *; };'; } >$@
$(shlib): exports.map

.PHONY: installcheck-prep prove_installcheck
installcheck-prep:
	bash $(srcdir)/test/installcheck-prep '$(bindir)' $(if $(ISOLATION),$(ISOLATION_TESTDB))

# "make prove_installcheck" runs the TAP tests of test/t, which start their
# own PostgreSQL and Redis, with the installed extension; PROVE_FLAGS gives
# prove more options (e.g. --verbose), PROVE_TESTS a subset.
PROVE_TESTS ?= test/t/*.pl
override PROVE_FLAGS += -I test/perl
prove_installcheck:
	$(prove_installcheck)
