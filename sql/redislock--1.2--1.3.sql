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

-- Shared (read) locks: any number of readers, excluded by a writer.
CREATE FUNCTION redis_lock_acquire_shared(key text,
                                          ttl_ms integer DEFAULT 30000,
                                          wait_ms integer DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redis_lock_acquire_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redis_lock_acquire_shared_session(key text,
                                                  ttl_ms integer DEFAULT 30000,
                                                  wait_ms integer DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redis_lock_acquire_shared_session'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redis_lock_release_shared(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redis_lock_release_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Semaphores, kept as redis-semaphore keeps its Semaphore and
-- MultiSemaphore: a sorted set at the key, one member a permit.
CREATE FUNCTION redis_semaphore_acquire(key text, lim integer,
                                        permits integer DEFAULT 1,
                                        ttl_ms integer DEFAULT 30000,
                                        wait_ms integer DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redis_semaphore_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redis_semaphore_acquire_session(key text, lim integer,
                                                permits integer DEFAULT 1,
                                                ttl_ms integer DEFAULT 30000,
                                                wait_ms integer DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redis_semaphore_acquire_session'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Ends one hold; returns the permits given back.
CREATE FUNCTION redis_semaphore_release(key text)
RETURNS integer
AS 'MODULE_PATHNAME', 'redis_semaphore_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- redis_locks() shows the mode of each lock and a semaphore's permits, and
-- redis_stats() counts semaphores: their columns change.
DROP FUNCTION redis_locks();
-- The locks and semaphores of every backend when redislock is preloaded,
-- else this backend's: a row per scope held, and for the scope awaited.
CREATE FUNCTION redis_locks(OUT key text, OUT scope text, OUT holds integer,
                            OUT fence bigint, OUT acquired_at timestamptz,
                            OUT lease_expires_at timestamptz,
                            OUT pid integer, OUT server name,
                            OUT granted boolean,
                            OUT waiting_since timestamptz,
                            OUT renewals bigint, OUT mode text,
                            OUT permits integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redis_locks'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

DROP FUNCTION redis_stats();
CREATE FUNCTION redis_stats(OUT server name, OUT calls bigint,
                            OUT round_trips bigint, OUT errors bigint,
                            OUT reconnects bigint, OUT redirects bigint,
                            OUT failovers bigint, OUT acquires bigint,
                            OUT acquire_waits bigint,
                            OUT acquire_timeouts bigint, OUT wait_ms bigint,
                            OUT renewals bigint, OUT leases_lost bigint,
                            OUT give_backs bigint, OUT recovered bigint,
                            OUT semaphore_acquires bigint,
                            OUT semaphore_waits bigint,
                            OUT semaphore_timeouts bigint,
                            OUT shared_acquires bigint,
                            OUT shared_waits bigint,
                            OUT shared_timeouts bigint,
                            OUT stats_reset timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redis_stats'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;
