-- redislock demo: a Redis lock and Redis stock, both tied to the
-- PostgreSQL transaction that uses them.
--
-- Run by scripts/demo as: psql -v redis_port=PORT -f demo/demo.sql
-- with REDIS_PORT set in the environment for the redis-cli peeks below.

-- Install the extension and point its foreign server at the demo Redis.
CREATE EXTENSION redislock;
ALTER SERVER redislock OPTIONS (SET port :'redis_port');
GRANT USAGE ON FOREIGN SERVER redislock TO PUBLIC;

-- 1. A transaction-scoped lock: taken now, released when the transaction ends
--    (after COMMIT is durable, or at ROLLBACK).
BEGIN;
SELECT redis_lock_acquire('order:42');
SELECT * FROM redis_locks();

-- What Redis holds meanwhile: the lock key (its value names this backend)
-- and its fencing counter.
\! redis-cli -p "$REDIS_PORT" --scan | sort | while read -r k; do echo "$k = $(redis-cli -p "$REDIS_PORT" get "$k")"; done

-- Another session cannot take it while we hold it (no waiting: false).
\! psql -X -A -t -c "SELECT redis_lock_acquire('order:42') AS other_session_got_it"
COMMIT;

-- The lock is gone once the transaction has committed.
SELECT * FROM redis_locks();
\! psql -X -A -t -c "SELECT redis_lock_acquire('order:42') AS other_session_got_it"

-- 2. Flash-sale stock kept in Redis.
SELECT redis_stock_set('sku:1', 5);

-- A decrement in a transaction that rolls back is given back to Redis.
BEGIN;
SELECT redis_stock_decr('sku:1');
ROLLBACK;
SELECT redis_stock_get('sku:1') AS stock_after_rollback;

-- A decrement in a transaction that commits stays.
BEGIN;
SELECT redis_stock_decr('sku:1');
COMMIT;
SELECT redis_stock_get('sku:1') AS stock_after_commit;
