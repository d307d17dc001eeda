-- Multi-key locks: every key of a set, or none.
\set VERBOSITY terse

-- bad input is refused before Redis is asked anything: 22004 for a null,
-- 22023 otherwise (regress_refusal(): setup.sql)
SELECT q, regress_refusal(q) FROM (VALUES
	($$SELECT redis_lock_acquire_all(NULL)$$),
	($$SELECT redis_lock_acquire_all('{}')$$),
	($$SELECT redis_lock_acquire_all('{{sets:a,sets:b},{sets:c,sets:d}}')$$),
	($$SELECT redis_lock_acquire_all(ARRAY['sets:a', NULL])$$),
	($$SELECT redis_lock_acquire_all(ARRAY['sets:a', ''])$$),
	($$SELECT redis_lock_acquire_all(ARRAY['sets:a', 'sets:b', 'sets:a'])$$),
	($$SELECT redis_lock_acquire_all('{sets:a}', NULL)$$),
	($$SELECT redis_lock_acquire_all('{sets:a}', 0)$$),
	($$SELECT redis_lock_acquire_all('{sets:a}', 1000, NULL)$$),
	($$SELECT redis_lock_acquire_all('{sets:a}', 1000, -2)$$),
	($$SELECT redis_lock_acquire_all_session(NULL)$$),
	($$SELECT redis_lock_acquire_all_session('{sets:a,sets:a}')$$)
) AS bad(q);
\! redis-cli -p $REDIS_PORT --scan --pattern 'sets:*' | wc -l

-- a set taken for the transaction: each key is an ordinary lock of ours
BEGIN;
SELECT redis_lock_acquire_all('{sets:a,sets:b,sets:c}', 20000);
\! redis-cli -p $REDIS_PORT MGET sets:a sets:b sets:c | grep -Ec '^pg:'
SELECT key, scope, holds FROM redis_locks() ORDER BY key;
COMMIT;
\! redis-cli -p $REDIS_PORT EXISTS sets:a sets:b sets:c
SELECT count(*) AS left_after_commit FROM redis_locks();

-- one key held by another client: nothing is taken, nothing is left behind
\! redis-cli -p $REDIS_PORT SET sets:b other-owner NX PX 60000 > /dev/null
SELECT redis_lock_acquire_all_session('{sets:a,sets:b,sets:c}');
\! redis-cli -p $REDIS_PORT EXISTS sets:a sets:c
SELECT count(*) AS held FROM redis_locks();
-- waiting: still nothing held when the wait runs out
SELECT redis_lock_acquire_all_session('{sets:c,sets:b,sets:a}', 1000, 200);
\! redis-cli -p $REDIS_PORT EXISTS sets:a sets:c
SELECT count(*) AS held FROM redis_locks();
-- the other client goes: the set is taken, in a session
\! redis-cli -p $REDIS_PORT DEL sets:b > /dev/null
SELECT redis_lock_acquire_all_session('{sets:c,sets:b,sets:a}', 1000, 200);
SELECT key, scope, holds FROM redis_locks() ORDER BY key;

-- holds stack: a key held already is renewed and held once more
SELECT redis_lock_acquire_all_session('{sets:a,sets:d}', 30000);
\! redis-cli -p $REDIS_PORT PTTL sets:a | awk '{ print ($1 > 25000) ? "renewed" : "ttl " $1 }'
SELECT key, scope, holds FROM redis_locks() ORDER BY key;
-- and each key ends as an ordinary hold does
SELECT redis_lock_release('sets:a');
SELECT redis_lock_release('sets:a');
SELECT redis_lock_release_all();
\! redis-cli -p $REDIS_PORT EXISTS sets:a sets:b sets:c sets:d

-- a rolled-back savepoint releases the set taken inside it
BEGIN;
SAVEPOINT s;
SELECT redis_lock_acquire_all('{sets:e,sets:f}');
ROLLBACK TO SAVEPOINT s;
\! redis-cli -p $REDIS_PORT EXISTS sets:e sets:f
COMMIT;

-- a key that others read is taken by nobody's set, and a semaphore's key
-- is of another type: nothing is taken, nothing is left behind
\! redis-cli -p $REDIS_PORT ZADD sets:g $(( $(date +%s%3N) + 60000 )) pg:elsewhere:5432:4242:1:0123456789abcdef0123456789abcdef > /dev/null
SELECT redis_lock_acquire_all_session('{sets:a,sets:g}');
\! redis-cli -p $REDIS_PORT ZADD sets:h 1000 a7f40257-f46d-4715-8bc2-b3cef6dd5c93 > /dev/null
SELECT regress_refusal($$SELECT redis_lock_acquire_all_session('{sets:a,sets:h}')$$);
\! redis-cli -p $REDIS_PORT EXISTS sets:a
SELECT count(*) AS held FROM redis_locks();
-- once their lease ended, the readers do not count
\! redis-cli -p $REDIS_PORT ZADD sets:g 1000 pg:elsewhere:5432:4242:1:0123456789abcdef0123456789abcdef > /dev/null
SELECT redis_lock_acquire_all_session('{sets:a,sets:g}');
\! redis-cli -p $REDIS_PORT TYPE sets:g
-- a lock of the set lost meanwhile is reported, and the others released
\! redis-cli -p $REDIS_PORT SET sets:g other-owner PX 60000 > /dev/null
SELECT redis_lock_release_all();
\! redis-cli -p $REDIS_PORT MGET sets:a sets:g
SELECT count(*) AS held FROM redis_locks();
\! redis-cli -p $REDIS_PORT DEL sets:g sets:h > /dev/null
