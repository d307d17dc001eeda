-- Semaphores: a sorted set at the key, one member a permit, as
-- redis-semaphore keeps them.
\set VERBOSITY terse
\set redis_port `echo "$REDIS_PORT"`

-- bad input is refused before Redis is asked anything: 22004 for a null,
-- 22023 otherwise (regress_refusal(): setup.sql)
SELECT q, regress_refusal(q) FROM (VALUES
	($$SELECT redis_semaphore_acquire(NULL, 3)$$),
	($$SELECT redis_semaphore_acquire('', 3)$$),
	($$SELECT redis_semaphore_acquire('sem:a', NULL)$$),
	($$SELECT redis_semaphore_acquire('sem:a', 0)$$),
	($$SELECT redis_semaphore_acquire('sem:a', 3, NULL)$$),
	($$SELECT redis_semaphore_acquire('sem:a', 3, 0)$$),
	($$SELECT redis_semaphore_acquire('sem:a', 3, 4)$$),
	($$SELECT redis_semaphore_acquire('sem:a', 3, 1, NULL)$$),
	($$SELECT redis_semaphore_acquire('sem:a', 3, 1, 0)$$),
	($$SELECT redis_semaphore_acquire('sem:a', 3, 1, 1000, NULL)$$),
	($$SELECT redis_semaphore_acquire('sem:a', 3, 1, 1000, -2)$$),
	($$SELECT redis_semaphore_acquire_session('sem:a', -1)$$),
	($$SELECT redis_semaphore_release(NULL)$$),
	($$SELECT redis_semaphore_release('')$$)
) AS bad(q);
\! redis-cli -p $REDIS_PORT --scan --pattern 'sem:*' | wc -l

-- permits taken for the transaction: one member a permit, scored by
-- Redis' clock in ms, the key's lease the ttl
BEGIN;
SELECT redis_semaphore_acquire('sem:a', 3, 2, 20000);
\! redis-cli -p $REDIS_PORT ZRANGE sem:a 0 -1 | sed -E 's/^pg:.*:[0-9a-f]{32}_/<token>_/'
\! redis-cli -p $REDIS_PORT ZRANGE sem:a 0 0 WITHSCORES | tail -1 | awk -v now=$(date +%s%3N) '{ d = now - $1; print (d >= -1000 && d < 5000) ? "scored now" : "score " $1 }'
\! redis-cli -p $REDIS_PORT PTTL sem:a | awk '{ print ($1 > 15000 && $1 <= 20000) ? "lease set" : "pttl " $1 }'
SELECT key, scope, holds, mode, permits, fence IS NULL AS no_fence
  FROM redis_locks() ORDER BY key;
-- two permits more would exceed the limit of 3: refused, the two kept
SELECT redis_semaphore_acquire('sem:a', 3, 2, 20000);
SELECT redis_semaphore_acquire('sem:a', 3, 1, 20000);
\! redis-cli -p $REDIS_PORT ZCARD sem:a
SELECT key, scope, holds, mode, permits FROM redis_locks() ORDER BY key;
COMMIT;
\! redis-cli -p $REDIS_PORT EXISTS sem:a
SELECT count(*) AS left_after_commit FROM redis_locks();

-- other clients' permits count: two of three taken elsewhere
\! redis-cli -p $REDIS_PORT ZADD sem:b $(date +%s%3N) other_0 $(date +%s%3N) other_1 > /dev/null
SELECT redis_semaphore_acquire_session('sem:b', 3, 2);
SELECT redis_semaphore_acquire_session('sem:b', 3);
-- waiting: refused when the wait runs out, holding what it held
SELECT redis_semaphore_acquire_session('sem:b', 3, 1, 1000, 200);
SELECT key, scope, holds, permits FROM redis_locks() ORDER BY key;
-- permits older than the lease are expired, whoever holds them
\! redis-cli -p $REDIS_PORT ZADD sem:b 1000 other_0 1000 other_1 > /dev/null
SELECT redis_semaphore_acquire_session('sem:b', 3, 2);
\! redis-cli -p $REDIS_PORT ZRANGE sem:b 0 -1 | sed -E 's/^pg:.*:[0-9a-f]{32}_/<token>_/'
SELECT key, scope, holds, permits FROM redis_locks() ORDER BY key;

-- a release ends one hold, the last taken, and gives back its permits
SELECT redis_semaphore_release('sem:b');
\! redis-cli -p $REDIS_PORT ZRANGE sem:b 0 -1 | sed -E 's/^pg:.*:[0-9a-f]{32}_/<token>_/'
SELECT redis_semaphore_release('sem:b');
\! redis-cli -p $REDIS_PORT EXISTS sem:b
SELECT redis_semaphore_release('sem:b');

-- a session hold is released before a transaction hold
BEGIN;
SELECT redis_semaphore_acquire('sem:c', 5, 1);
SELECT redis_semaphore_acquire_session('sem:c', 5, 3);
SELECT redis_semaphore_release('sem:c');
SELECT key, scope, holds, permits FROM redis_locks() ORDER BY key;
\! redis-cli -p $REDIS_PORT ZCARD sem:c
COMMIT;
\! redis-cli -p $REDIS_PORT EXISTS sem:c

-- the end of a transaction gives back its permits and keeps the session's
BEGIN;
SELECT redis_semaphore_acquire_session('sem:d', 5, 1);
SELECT redis_semaphore_acquire('sem:d', 5, 2);
\! redis-cli -p $REDIS_PORT ZCARD sem:d
COMMIT;
\! redis-cli -p $REDIS_PORT ZCARD sem:d
SELECT key, scope, holds, permits FROM redis_locks() ORDER BY key;

-- a rolled-back savepoint gives back what was taken inside it
BEGIN;
SAVEPOINT s;
SELECT redis_semaphore_acquire('sem:d', 5, 3);
\! redis-cli -p $REDIS_PORT ZCARD sem:d
ROLLBACK TO SAVEPOINT s;
\! redis-cli -p $REDIS_PORT ZCARD sem:d
-- and a released one passes them to the transaction
SAVEPOINT t;
SELECT redis_semaphore_acquire('sem:d', 5, 2);
RELEASE SAVEPOINT t;
SELECT key, scope, holds, permits FROM redis_locks() ORDER BY key;
ROLLBACK;
\! redis-cli -p $REDIS_PORT ZCARD sem:d

-- a key is a lock or a semaphore, not both
SELECT regress_refusal($$SELECT redis_lock_acquire('sem:d')$$);
SELECT redis_lock_release('sem:d');
SELECT redis_lock_fence('sem:d');
SELECT redis_lock_acquire_session('sem:lock');
SELECT regress_refusal($$SELECT redis_semaphore_acquire('sem:lock', 2)$$);
SELECT redis_semaphore_release('sem:lock');

-- redis_lock_release_all() ends every kind
SELECT redis_lock_release_all();
\! redis-cli -p $REDIS_PORT EXISTS sem:d sem:lock
SELECT count(*) AS held FROM redis_locks();

-- PREPARE TRANSACTION is refused while permits are held for it
BEGIN;
SELECT redis_semaphore_acquire('sem:e', 2);
PREPARE TRANSACTION 'sem';
\! redis-cli -p $REDIS_PORT EXISTS sem:e

-- a prefix: the key is key_prefix || key, so that SQL and
-- redis-semaphore's Semaphore named "jobs" share semaphore:jobs
CREATE SERVER sem_prefix FOREIGN DATA WRAPPER redislock
  OPTIONS (host '127.0.0.1', port :'redis_port', key_prefix 'semaphore:');
SET redislock.server = 'sem_prefix';
SELECT redis_semaphore_acquire_session('jobs', 2);
\! redis-cli -p $REDIS_PORT ZCARD semaphore:jobs
SELECT redis_semaphore_release('jobs');
RESET redislock.server;
DROP SERVER sem_prefix;
