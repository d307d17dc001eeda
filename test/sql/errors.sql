-- Bad input is an error that touches nothing in Redis.
SELECT redis_lock_acquire(NULL);
SELECT redis_lock_acquire('');
SELECT redis_lock_acquire('err:k', 0);
SELECT redis_lock_acquire('err:k', -5);
SELECT redis_lock_acquire('err:k', NULL);
SELECT redis_lock_acquire('err:k', 1000, -2);
SELECT redis_lock_acquire('err:k', 1000, NULL);
SELECT redis_lock_acquire_session(NULL);
SELECT redis_lock_acquire_session('err:k', 0);
SELECT redis_lock_release(NULL);
SELECT redis_lock_release('');
SELECT redis_lock_extend('err:k', 0);
SELECT redis_lock_extend(NULL, 1000);
SELECT redis_lock_fence(NULL);
SELECT redis_stock_set(NULL, 1);
SELECT redis_stock_set('err:s', -1);
SELECT redis_stock_set('err:s', NULL);
SELECT redis_stock_decr('err:s', 0);
SELECT redis_stock_decr('err:s', -1);
SELECT redis_stock_incr('err:s', 0);
SELECT redis_stock_get('');

-- a key that is where the extension keeps something beside another key
-- ({<tag>}:<kind>:<key>, the tag being the smallest number that hashes to
-- the Cluster slot of <key>: 8630 for "sku", 25578 for "k") is refused
SELECT redis_lock_acquire_session('{8630}:ops:sku', 2147483647);
SELECT redis_lock_acquire('{8630}:buyers:sku');
SELECT redis_lock_release('{25578}:fence:k');
SELECT redis_lock_extend('{25578}:fence:k', 1000);
SELECT redis_lock_fence('{25578}:fence:k');
SELECT redis_stock_set('{8630}:ops:sku', 1);
SELECT redis_stock_get('{8630}:buyers:sku');
SELECT redis_stock_incr('{25578}:fence:k');
SELECT redis_stock_decr('{8630}:ops:sku');
\! redis-cli -p $REDIS_PORT EXISTS '{8630}:ops:sku' '{8630}:buyers:sku' '{25578}:fence:k'
-- but not a key of that shape with another tag, nor other hash-tagged keys
SELECT redis_lock_acquire_session('{8631}:ops:sku'),
       redis_lock_acquire_session('{order}:42'),
       redis_lock_acquire_session('{8630}:lock:sku');
SELECT redis_lock_release_all();

-- none of it reached Redis
SELECT redis_stock_get('err:s') AS untouched_stock;
SELECT count(*) AS held FROM redis_locks() WHERE key LIKE 'err:%';

-- releasing, extending or fencing what is not held
SELECT redis_lock_release('err:not_held');
SELECT redis_lock_extend('err:not_held', 1000);
SELECT redis_lock_fence('err:not_held');

-- stock that is absent, or not an integer
\set VERBOSITY terse
SELECT redis_stock_decr('err:absent');
\! redis-cli -p $REDIS_PORT SET err:text 'ten' > /dev/null
SELECT redis_stock_decr('err:text');
SELECT redis_stock_get('err:text');
SELECT redis_stock_incr('err:text');
-- a lock key that holds another type
\! redis-cli -p $REDIS_PORT HSET err:hash f v > /dev/null
SELECT redis_lock_acquire('err:hash');
SELECT count(*) AS held FROM redis_locks() WHERE key = 'err:hash';
\set VERBOSITY default

-- a lease that a Redlock server's clock drift would leave no time, refused
-- before any master is asked (none listens at these ports)
CREATE SERVER err_redlock FOREIGN DATA WRAPPER redislock
    OPTIONS (redlock '127.0.0.1:9,127.0.0.1:10,127.0.0.1:11');
SET redislock.server = err_redlock;
SELECT redis_lock_acquire('err:short', 2);
SELECT redis_lock_extend('err:short', 1);
RESET redislock.server;
DROP SERVER err_redlock;
