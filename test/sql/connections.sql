-- redis_connections(), redis_disconnect() and redis_disconnect_all(), as
-- postgres_fdw's functions of the same names: this backend's Redis
-- connections, and closing those not in use.  Endpoints carry the test
-- Redis' port, so only their shape is shown.

-- a new backend has no connection yet
SELECT count(*) AS open FROM redis_connections();
SELECT redis_disconnect_all();

-- a call opens one; it is in use until the end of its transaction
BEGIN;
SELECT redis_stock_get('conn:absent') IS NULL AS absent;
SELECT server_name, endpoint LIKE '127.0.0.1:%' AS loopback, in_use, valid
  FROM redis_connections();
COMMIT;
SELECT server_name, endpoint LIKE '127.0.0.1:%' AS loopback, in_use, valid
  FROM redis_connections();

-- closing it
SELECT redis_disconnect('redislock');
SELECT count(*) AS open FROM redis_connections();
SELECT redis_disconnect('redislock');
SELECT redis_disconnect_all();

-- an unknown server is an error
\set VERBOSITY sqlstate
SELECT redis_disconnect('conn_no_such_server');
\set VERBOSITY default

-- the next call opens a connection again, and disconnect_all closes it
SELECT redis_stock_get('conn:absent') IS NULL AS absent;
SELECT count(*) AS open FROM redis_connections();
SELECT redis_disconnect_all();
SELECT count(*) AS open FROM redis_connections();

-- a connection holding a session lock is in use: it is not closed
SELECT redis_lock_acquire_session('conn:held');
SELECT server_name, in_use, valid FROM redis_connections();
SELECT redis_disconnect('redislock');
SELECT redis_disconnect_all();
SELECT count(*) AS open FROM redis_connections();

-- nor one holding a transaction lock, until the transaction ends
BEGIN;
SELECT redis_lock_acquire('conn:tx');
SELECT redis_lock_release('conn:held');
SELECT redis_disconnect('redislock');
COMMIT;

-- with nothing held it is closed
SELECT in_use FROM redis_connections();
SELECT redis_disconnect('redislock');
SELECT count(*) AS open FROM redis_connections();
SELECT count(*) AS held FROM redis_locks();
