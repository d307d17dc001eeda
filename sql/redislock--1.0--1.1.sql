/* redislock--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION redislock UPDATE TO '1.1'" to load this file. \quit

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
-- server's Sentinels and master; a Redlock server's masters.
CREATE FUNCTION redis_server_nodes(server name DEFAULT NULL,
                                   OUT endpoint text, OUT role text,
                                   OUT slots text, OUT connected boolean)
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
