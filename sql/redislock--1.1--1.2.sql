/* redislock--1.1--1.2.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION redislock UPDATE TO '1.2'" to load this file. \quit

-- The timeline on which the decrement records of 1.1, which name none, were
-- made: the one that ALTER EXTENSION UPDATE from 1.1 found (read from the
-- last checkpoint, which after a promotion may still name the timeline
-- before it: records of 1.1 are then left undecided, never misjudged).
-- redis_stock_recover() decides those records on that timeline only.
-- A fresh install has no such records, and no row.
CREATE TABLE redis_stock_legacy_timeline (timeline integer NOT NULL);
GRANT SELECT ON redis_stock_legacy_timeline TO PUBLIC;
INSERT INTO redis_stock_legacy_timeline
  SELECT timeline_id FROM pg_control_checkpoint();

-- A row per decrement that took units, written by redis_stock_decr() in the
-- (sub)transaction that made it, so that it commits or vanishes with the
-- work the units pay for: PostgreSQL's own commit is the decision that a
-- unit was sold.  redis_stock_recover() decides the records left in Redis
-- by these rows, and deletes the rows whose records are gone.  The
-- extension writes and reads it itself: nobody needs a grant on it.  A row
-- holds the ID of the (sub)transaction that made the decrement, its
-- operation id (as its record names it), the foreign server of the item and
-- the Redis key of the item's records.
CREATE TABLE redis_stock_decrements (xid xid8 NOT NULL, op text NOT NULL,
                                     server oid NOT NULL, records bytea NOT NULL);
CREATE INDEX redis_stock_decrements_xid ON redis_stock_decrements (xid);
REVOKE ALL ON redis_stock_decrements FROM PUBLIC;

-- redis_locks() shows the locks of every backend: its columns change.
DROP FUNCTION redis_locks();
-- The locks of every backend when redislock is preloaded, else this
-- backend's: a row per scope held, or for the scope awaited.
CREATE FUNCTION redis_locks(OUT key text, OUT scope text, OUT holds integer,
                            OUT fence bigint, OUT acquired_at timestamptz,
                            OUT lease_expires_at timestamptz,
                            OUT pid integer, OUT server name,
                            OUT granted boolean,
                            OUT waiting_since timestamptz,
                            OUT renewals bigint)
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
                            OUT stats_reset timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'redis_stats'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

CREATE FUNCTION redis_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'redis_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION redis_stats_reset() FROM PUBLIC;

-- The fencing token of a held lock for a write that stores it beside the
-- data the lock protects; refused (40001) when the stored token is newer.
CREATE FUNCTION redis_fence_guard(key text, stored bigint)
RETURNS bigint
AS 'MODULE_PATHNAME', 'redis_fence_guard'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
