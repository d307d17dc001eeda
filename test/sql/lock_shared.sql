-- Shared (read) locks: the readers are a sorted set at the key, one member
-- an owner token scored by the end of its lease.
\set VERBOSITY terse

-- bad input is refused before Redis is asked anything: 22004 for a null,
-- 22023 otherwise (regress_refusal(): setup.sql)
SELECT q, regress_refusal(q) FROM (VALUES
	($$SELECT redis_lock_acquire_shared(NULL)$$),
	($$SELECT redis_lock_acquire_shared('')$$),
	($$SELECT redis_lock_acquire_shared('rw:a', NULL)$$),
	($$SELECT redis_lock_acquire_shared('rw:a', 0)$$),
	($$SELECT redis_lock_acquire_shared('rw:a', 1000, NULL)$$),
	($$SELECT redis_lock_acquire_shared('rw:a', 1000, -2)$$),
	($$SELECT redis_lock_acquire_shared_session(NULL)$$),
	($$SELECT redis_lock_release_shared(NULL)$$),
	($$SELECT redis_lock_release_shared('')$$)
) AS bad(q);
\! redis-cli -p $REDIS_PORT --scan --pattern 'rw:*' | wc -l

-- a reader for the transaction: its token scored by its lease's end on
-- Redis' clock, the key's lease the ttl
BEGIN;
SELECT redis_lock_acquire_shared('rw:a', 20000);
\! redis-cli -p $REDIS_PORT TYPE rw:a
\! redis-cli -p $REDIS_PORT ZRANGE rw:a 0 -1 WITHSCORES | sed -E 's/^pg:.*:[0-9a-f]{32}$/<token>/' | awk -v now=$(date +%s%3N) 'NR == 2 { d = $1 - now; $0 = (d > 15000 && d <= 21000) ? "lease end" : "score " $1 } { print }'
\! redis-cli -p $REDIS_PORT PTTL rw:a | awk '{ print ($1 > 15000 && $1 <= 20000) ? "lease set" : "pttl " $1 }'
SELECT key, scope, holds, mode, fence FROM redis_locks() ORDER BY key, mode;
-- a plain SET NX locker finds the key taken
\! redis-cli -p $REDIS_PORT SET rw:a other NX PX 1000
-- another backend (of another PostgreSQL server) reads too, and this
-- backend's holds stack
\! redis-cli -p $REDIS_PORT ZADD rw:a $(( $(date +%s%3N) + 60000 )) pg:elsewhere:5432:4242:1:0123456789abcdef0123456789abcdef
SELECT redis_lock_acquire_shared('rw:a');
SELECT key, scope, holds, mode FROM redis_locks() ORDER BY key, mode;
-- a reader is no writer: redis_lock_release() leaves the hold alone
SELECT redis_lock_release('rw:a');
SELECT redis_lock_fence('rw:a');
COMMIT;
\! redis-cli -p $REDIS_PORT ZRANGE rw:a 0 -1
SELECT count(*) AS left_after_commit FROM redis_locks();

-- readers elsewhere keep writers out, and a writer keeps readers out
SELECT redis_lock_acquire_session('rw:a');
SELECT redis_lock_acquire_session('rw:a', 1000, 200);
\! redis-cli -p $REDIS_PORT SET rw:b other-writer NX PX 60000
SELECT redis_lock_acquire_shared_session('rw:b');
SELECT redis_lock_acquire_shared_session('rw:b', 1000, 200);
-- readers whose lease ended do not count
\! redis-cli -p $REDIS_PORT ZADD rw:a 1000 pg:elsewhere:5432:4242:1:0123456789abcdef0123456789abcdef > /dev/null
SELECT redis_lock_acquire_session('rw:a');
\! redis-cli -p $REDIS_PORT TYPE rw:a
SELECT redis_lock_release('rw:a');
\! redis-cli -p $REDIS_PORT DEL rw:b > /dev/null

-- a semaphore's key is not taken for a lock's readers, whose expiry would
-- take its permits for readers gone: refused, and left alone
\! redis-cli -p $REDIS_PORT ZADD rw:sem 1000 a7f40257-f46d-4715-8bc2-b3cef6dd5c93 > /dev/null
SELECT regress_refusal($$SELECT redis_lock_acquire('rw:sem')$$);
SELECT regress_refusal($$SELECT redis_lock_acquire_shared('rw:sem')$$);
\! redis-cli -p $REDIS_PORT ZCARD rw:sem
\! redis-cli -p $REDIS_PORT DEL rw:sem > /dev/null

-- a backend's own holds never conflict: its exclusive hold covers its
-- shared one, and when it ends the key becomes the readers' set again
SELECT redis_lock_acquire_session('rw:c');
SELECT redis_lock_acquire_shared_session('rw:c');
\! redis-cli -p $REDIS_PORT TYPE rw:c
SELECT key, scope, holds, mode, fence IS NOT NULL AS fenced
  FROM redis_locks() ORDER BY key, mode;
SELECT redis_lock_release('rw:c');
\! redis-cli -p $REDIS_PORT TYPE rw:c
\! redis-cli -p $REDIS_PORT ZRANGE rw:c 0 -1 | sed -E 's/^pg:.*:[0-9a-f]{32}$/<token>/'
SELECT redis_lock_release_shared('rw:c');
\! redis-cli -p $REDIS_PORT EXISTS rw:c
-- a reader alone may take the lock exclusively too (an upgrade) ...
SELECT redis_lock_acquire_shared_session('rw:d');
SELECT redis_lock_acquire_session('rw:d');
\! redis-cli -p $REDIS_PORT TYPE rw:d
SELECT redis_lock_release_shared('rw:d');
\! redis-cli -p $REDIS_PORT TYPE rw:d
SELECT redis_lock_release('rw:d');
\! redis-cli -p $REDIS_PORT EXISTS rw:d
-- ... but not while another client reads
SELECT redis_lock_acquire_shared_session('rw:d');
\! redis-cli -p $REDIS_PORT ZADD rw:d $(( $(date +%s%3N) + 60000 )) pg:elsewhere:5432:4242:1:0123456789abcdef0123456789abcdef > /dev/null
SELECT redis_lock_acquire_session('rw:d');
SELECT key, scope, holds, mode FROM redis_locks() ORDER BY key, mode;
\! redis-cli -p $REDIS_PORT ZCARD rw:d
SELECT redis_lock_release_shared('rw:d');
SELECT redis_lock_release_shared('rw:d');
\! redis-cli -p $REDIS_PORT ZRANGE rw:d 0 -1
\! redis-cli -p $REDIS_PORT DEL rw:d > /dev/null

-- both modes for the transaction: its end releases the key once, quietly
BEGIN;
SELECT redis_lock_acquire('rw:k');
SELECT redis_lock_acquire_shared('rw:k');
COMMIT;
\! redis-cli -p $REDIS_PORT EXISTS rw:k
SELECT count(*) AS left_after_commit FROM redis_locks();

-- a rolled-back savepoint ends the shared holds taken inside it
BEGIN;
SELECT redis_lock_acquire_shared('rw:e');
SAVEPOINT s;
SELECT redis_lock_acquire_shared('rw:f');
ROLLBACK TO SAVEPOINT s;
\! redis-cli -p $REDIS_PORT EXISTS rw:e rw:f
COMMIT;
\! redis-cli -p $REDIS_PORT EXISTS rw:e

-- redis_lock_release_all() ends every kind
SELECT redis_lock_acquire_shared_session('rw:g');
SELECT redis_lock_acquire_session('rw:h');
SELECT redis_semaphore_acquire_session('rw:i', 2);
SELECT redis_lock_release_all();
\! redis-cli -p $REDIS_PORT EXISTS rw:g rw:h rw:i

-- PREPARE TRANSACTION is refused while a shared hold is tied to it
BEGIN;
SELECT redis_lock_acquire_shared('rw:j');
PREPARE TRANSACTION 'rw';
\! redis-cli -p $REDIS_PORT EXISTS rw:j
