/* redislock--1.3.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION redislock" to load this file. \quit

-- Where Redis is: a foreign data wrapper whose servers carry host, port,
-- unix_socket, database and key_prefix, and whose user mappings carry the
-- Redis ACL username and password.
CREATE FUNCTION redislock_fdw_validator(text[], oid)
RETURNS void
AS 'MODULE_PATHNAME'
LANGUAGE C STRICT;

CREATE FOREIGN DATA WRAPPER redislock
  VALIDATOR redislock_fdw_validator;

CREATE SERVER redislock FOREIGN DATA WRAPPER redislock
  OPTIONS (host '127.0.0.1', port '6379');

-- Locks.  The functions are not STRICT: a NULL argument is an error.
CREATE FUNCTION redis_lock_acquire(key text, ttl_ms integer DEFAULT 30000,
                                   wait_ms integer DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redis_lock_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redis_lock_acquire_session(key text,
                                           ttl_ms integer DEFAULT 30000,
                                           wait_ms integer DEFAULT 0)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redis_lock_acquire_session'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Every key of a set taken, or none; each key then holds as
-- redis_lock_acquire() takes it.
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

CREATE FUNCTION redis_lock_release(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redis_lock_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redis_lock_release_all()
RETURNS integer
AS 'MODULE_PATHNAME', 'redis_lock_release_all'
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

CREATE FUNCTION redis_lock_extend(key text, ttl_ms integer)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redis_lock_extend'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redis_lock_fence(key text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redis_lock_fence'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The fencing token of a held lock for a write that stores it beside the
-- data the lock protects; refused (40001) when the stored token is newer.
CREATE FUNCTION redis_fence_guard(key text, stored bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redis_fence_guard'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

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

-- These need redislock in shared_preload_libraries.
CREATE FUNCTION redis_blocking_pids(pid integer)
RETURNS integer[]
AS 'MODULE_PATHNAME', 'redis_blocking_pids'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

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

CREATE FUNCTION redis_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'redis_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION redis_stats_reset() FROM PUBLIC;

-- Flash-sale stock
CREATE FUNCTION redis_stock_set(key text, qty bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'redis_stock_set'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redis_stock_get(key text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redis_stock_get'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redis_stock_incr(key text, qty bigint DEFAULT 1)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redis_stock_incr'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redis_stock_decr(key text, qty bigint DEFAULT 1,
                                 buyer text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redis_stock_decr'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Stock administration is for those an administrator chooses.
REVOKE EXECUTE ON FUNCTION redis_stock_set(text, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION redis_stock_incr(text, bigint) FROM PUBLIC;

-- Connections of this backend, as postgres_fdw shows and closes its own.
CREATE FUNCTION redis_connections(OUT server_name name, OUT endpoint text,
                                  OUT user_name name, OUT in_use boolean,
                                  OUT valid boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redis_connections'
LANGUAGE C VOLATILE PARALLEL RESTRICTED STRICT ROWS 4;

CREATE FUNCTION redis_disconnect(server name)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redis_disconnect'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

CREATE FUNCTION redis_disconnect_all()
RETURNS boolean
AS 'MODULE_PATHNAME', 'redis_disconnect_all'
LANGUAGE C VOLATILE PARALLEL RESTRICTED STRICT;

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

-- Removing an item, and settling decrements that their backends could not.
CREATE FUNCTION redis_stock_delete(key text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'redis_stock_delete'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION redis_stock_recover(OUT key text, OUT xid xid8, OUT qty bigint,
                                    OUT buyer text, OUT outcome text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redis_stock_recover'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

REVOKE EXECUTE ON FUNCTION redis_stock_delete(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION redis_stock_recover() FROM PUBLIC;

-- The timeline on which the decrement records of 1.1, which name none, were
-- made: the one that ALTER EXTENSION UPDATE from 1.1 found (read from the
-- last checkpoint, which after a promotion may still name the timeline
-- before it: records of 1.1 are then left undecided, never misjudged).
-- redis_stock_recover() decides those records on that timeline only.
-- A fresh install has no such records, and no row.
CREATE TABLE redis_stock_legacy_timeline (timeline integer NOT NULL);
GRANT SELECT ON redis_stock_legacy_timeline TO PUBLIC;

-- A row per decrement that took units, written by redis_stock_decr() in the
-- (sub)transaction that made it, so that it commits or vanishes with the
-- work the units pay for: PostgreSQL's own commit is the decision that a
-- unit was sold.  redis_stock_recover() decides the records left in Redis
-- by these rows, and deletes the rows whose records are gone.  The
-- extension writes and reads it itself: nobody needs a grant on it.  A row
-- holds the ID of the (sub)transaction that made the decrement, its
-- operation id (as its record names it), the foreign server of the item,
-- the Redis key of the item's records, and when its record was first found
-- gone: the row is deleted redislock.purge_delay after that.  The table's
-- OID, with the database's, names this installation in the operation ids
-- of its decrements: a recovery decides by these rows only the records
-- whose rows are here.
CREATE TABLE redis_stock_decrements (xid xid8 NOT NULL, op text NOT NULL,
                                     server oid NOT NULL, records bytea NOT NULL,
                                     gone_since timestamptz);
REVOKE ALL ON redis_stock_decrements FROM PUBLIC;
