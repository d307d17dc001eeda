/* redislock--1.2--1.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION redislock UPDATE TO '1.3'" to load this file. \quit

-- A random number drawn for this installation of the extension.  The
-- operation ids of its decrements name it, beside the database, so that a
-- recovery decides by its rows only the records whose rows are in its own
-- redis_stock_decrements: not those of another database, nor those of an
-- installation dropped before (whose rows went with it).  The records of
-- 1.2 name neither, and are decided by their transaction's status.
CREATE TABLE redis_stock_installation (id bigint NOT NULL);
REVOKE ALL ON redis_stock_installation FROM PUBLIC;
INSERT INTO redis_stock_installation
  SELECT ('x' || substr(translate(gen_random_uuid()::text, '-', ''), 1, 16))::bit(64)::bigint;
