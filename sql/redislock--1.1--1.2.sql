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
