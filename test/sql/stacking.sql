-- Holds stack as advisory locks do; the key goes when the last hold ends.
SELECT redis_lock_acquire_session('stack:k'), redis_lock_acquire_session('stack:k');
SELECT redis_lock_fence('stack:k') AS fence \gset
SELECT redis_lock_acquire_session('stack:k', 45000);
SELECT key, scope, holds, fence = :fence AS same_fence FROM redis_locks();
\! redis-cli -p $REDIS_PORT PTTL stack:k | awk '{ print ($1 > 40000) ? "lease renewed" : "ttl " $1 }'
SELECT redis_lock_release('stack:k');
SELECT redis_lock_release('stack:k');
\! redis-cli -p $REDIS_PORT EXISTS stack:k
SELECT redis_lock_release('stack:k');
\! redis-cli -p $REDIS_PORT EXISTS stack:k
SELECT redis_lock_release('stack:k');

-- session and transaction holds on one key
BEGIN;
SELECT redis_lock_acquire_session('stack:m');
SELECT redis_lock_acquire('stack:m');
SELECT key, scope, holds FROM redis_locks() ORDER BY scope;
COMMIT;
SELECT key, scope, holds FROM redis_locks();
\! redis-cli -p $REDIS_PORT EXISTS stack:m
-- release ends session holds first
BEGIN;
SELECT redis_lock_acquire('stack:m');
SELECT redis_lock_release('stack:m');
SELECT key, scope, holds FROM redis_locks();
\! redis-cli -p $REDIS_PORT EXISTS stack:m
COMMIT;
\! redis-cli -p $REDIS_PORT EXISTS stack:m
SELECT count(*) FROM redis_locks();
