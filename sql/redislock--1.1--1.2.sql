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
