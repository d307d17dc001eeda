-- Locks exclude every client that locks a key with SET NX and a token.
\set VERBOSITY terse

-- a lock held by another client (as redsync or redis-py would hold it)
\! redis-cli -p $REDIS_PORT SET locks:foreign other-owner NX PX 60000 > /dev/null
SELECT redis_lock_acquire('locks:foreign') AS got_foreign;
SELECT redis_lock_acquire('locks:foreign', 1000, 150) AS got_after_wait;
\! redis-cli -p $REDIS_PORT GET locks:foreign
-- releasing it is refused: we do not hold it, and the key is untouched
SELECT redis_lock_release('locks:foreign');
\! redis-cli -p $REDIS_PORT GET locks:foreign
\! redis-cli -p $REDIS_PORT DEL locks:foreign > /dev/null

-- a session lock: the Redis value is our owner token, the TTL our ttl_ms
SELECT redis_lock_acquire_session('locks:s1', 20000);
\! redis-cli -p $REDIS_PORT GET locks:s1 | grep -Ec '^pg:[^:]+:[0-9]+:[0-9]+:[0-9]+:[0-9a-f]{32}$'
\! redis-cli -p $REDIS_PORT PTTL locks:s1 | awk '{ print ($1 > 15000 && $1 <= 20000) ? "ttl ok" : "ttl " $1 }'
SELECT key, scope, holds, fence > 0 AS fenced,
       lease_expires_at - acquired_at BETWEEN interval '19 s' AND interval '21 s' AS lease
  FROM redis_locks();

-- extend resets the lease, only while the lock is ours
SELECT redis_lock_extend('locks:s1', 60000);
\! redis-cli -p $REDIS_PORT PTTL locks:s1 | awk '{ print ($1 > 55000) ? "extended" : "ttl " $1 }'

-- fencing tokens strictly increase across holders
SELECT redis_lock_fence('locks:s1') AS fence1 \gset
SELECT redis_lock_release('locks:s1');
SELECT redis_lock_fence('locks:s1') AS fence_after_release;
\! redis-cli -p $REDIS_PORT EXISTS locks:s1
SELECT redis_lock_acquire_session('locks:s1');
SELECT redis_lock_fence('locks:s1') > :fence1 AS fence_increased;
-- the token is kept beside the lock, in its slot, for the lease
\! redis-cli -p $REDIS_PORT --scan --pattern '*:fence:locks:s1'

-- a lease lost to expiry and another owner: release leaves their key alone
SELECT redis_lock_acquire_session('locks:lost', 100);
SELECT pg_sleep(0.3);
\! redis-cli -p $REDIS_PORT SET locks:lost someone-else NX PX 60000 > /dev/null
SELECT redis_lock_extend('locks:lost', 1000);
SELECT redis_lock_release('locks:lost');
\! redis-cli -p $REDIS_PORT GET locks:lost
\! redis-cli -p $REDIS_PORT DEL locks:lost > /dev/null

-- re-acquiring a lost lock is an error, not a silent new lease
SELECT redis_lock_acquire_session('locks:lost2', 100);
SELECT pg_sleep(0.3);
\! redis-cli -p $REDIS_PORT SET locks:lost2 someone-else NX PX 60000 > /dev/null
SELECT redis_lock_acquire_session('locks:lost2');
SELECT redis_lock_release('locks:lost2');
\! redis-cli -p $REDIS_PORT DEL locks:lost2 > /dev/null

-- release_all ends everything and counts the keys
SELECT redis_lock_acquire_session('locks:a'), redis_lock_acquire_session('locks:b');
SELECT redis_lock_release_all();
SELECT count(*) FROM redis_locks();
\! redis-cli -p $REDIS_PORT EXISTS locks:a locks:b locks:s1
SELECT redis_lock_release_all();
\set VERBOSITY default

-- without shared_preload_libraries: this backend's locks, with its pid;
-- what needs shared memory says how to have it
SELECT redis_lock_acquire_session('locks:own');
SELECT key, scope, holds, pid = pg_backend_pid() AS own, server, granted,
       waiting_since, renewals
  FROM redis_locks();
SELECT redis_lock_release('locks:own');
SELECT redis_blocking_pids(pg_backend_pid());
SELECT * FROM redis_stats();
SELECT redis_stats_reset();
\set VERBOSITY sqlstate
SELECT redis_blocking_pids(pg_backend_pid());
SELECT * FROM redis_stats();
\set VERBOSITY default
