/* redislock--1.2--1.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION redislock UPDATE TO '1.3'" to load this file. \quit

-- When a row's record was first found gone from Redis: the row is deleted
-- redislock.purge_delay after that, so that a record that a Redis losing
-- acknowledged writes brings back still finds its row.
ALTER TABLE redis_stock_decrements ADD COLUMN gone_since timestamptz;
