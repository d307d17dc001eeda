EXTENSION = redislock
EXTVERSION = 1.1

MODULE_big = redislock
OBJS = src/redislock.o src/resp.o src/node.o src/batch.o src/connection.o \
	src/args.o src/keys.o src/scripts.o src/option.o src/lock.o src/stock.o \
	src/recover.o src/xact.o
SHLIB_LINK = -lhiredis

DATA = sql/redislock--1.0.sql sql/redislock--1.1.sql sql/redislock--1.0--1.1.sql

REGRESS = setup fdw_options errors locks stacking transactions stock \
	binary_keys privileges seckill_example
REGRESS_OPTS = --inputdir=.

ISOLATION = lock_wait lock_rollback savepoint_release stock_no_oversell \
	stock_buyer
ISOLATION_OPTS = --inputdir=test

TAP_TESTS = 1

# Export only what PostgreSQL looks up in the library: _PG_init,
# Pg_magic_func, and each SQL-callable function X with its pg_finfo_X.  The
# list is made from the objects at link time (every pg_finfo_X defined by
# PG_FUNCTION_INFO_V1 names an X), so a new SQL function needs nothing here,
# and internal helpers stay local whatever their names.
SHLIB_LINK += -Wl,--version-script=exports.map
EXTRA_CLEAN += exports.map

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

PG_CPPFLAGS += -Wall -Wmissing-prototypes

# every object depends on the shared header
$(OBJS): src/redislock.h

# the version script that SHLIB_LINK names (see above)
exports.map: $(OBJS)
	{ echo '{ global: _PG_init; Pg_magic_func;'; \
	  nm --defined-only $(OBJS) | sed -n 's/^[0-9a-f]* T pg_finfo_\(.*\)$$/  \1; pg_finfo_\1;/p' | sort -u; \
	  echo 'local: *; };'; } >$@
$(shlib): exports.map
