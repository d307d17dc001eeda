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

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

PG_CPPFLAGS += -Wall -Wmissing-prototypes

# every object depends on the shared header
$(OBJS): src/redislock.h
