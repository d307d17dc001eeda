/* redislock--1.2--1.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION redislock UPDATE TO '1.3'" to load this file. \quit

-- When a row's record was first found gone from Redis: the row is deleted
-- redislock.purge_delay after that, so that a record that a Redis losing
-- acknowledged writes brings back still finds its row.
ALTER TABLE redis_stock_decrements ADD COLUMN gone_since timestamptz;

-- redis_server_nodes() shows what software each node runs: its columns
-- change.
DROP FUNCTION redis_server_nodes(name);
-- The nodes this backend knows of a server: a single server's one; a Redis
-- Cluster's masters, with the slots each serves, and replicas; a Sentinel
-- server's Sentinels and master; a Redlock server's masters.  Each with
-- the name and version of the server software that it gave when the
-- backend last connected ("redis" or "valkey").
CREATE FUNCTION redis_server_nodes(server name DEFAULT NULL,
                                   OUT endpoint text, OUT role text,
                                   OUT slots text, OUT connected boolean,
                                   OUT software text, OUT version text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redis_server_nodes'
LANGUAGE C VOLATILE PARALLEL RESTRICTED ROWS 6;

-- Multi-key locks: every key of a set taken, or none.
CREATE FUNCTION redis_lock_acquire_all(keys text[],
                                       ttl_ms integer DEFAULT 30000,
                                       wait_ms integer DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redis_lock_acquire_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redis_lock_acquire_all_session(keys text[],
                                               ttl_ms integer DEFAULT 30000,
                                               wait_ms integer DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redis_lock_acquire_all_session'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
