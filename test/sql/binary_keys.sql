-- Keys and values travel as binary-safe arguments, never as Lua source.
\set VERBOSITY terse
SELECT redis_lock_acquire_session(k) AS ok
  FROM (VALUES ('key with spaces'), (E'line1\nline2'), ('100% sure %s %d'),
               ('ключ-キー-🔒'), ('quote''s "and" \back'),
               ('end'' ) redis.call(''FLUSHALL'') --'),
               ('{tag}lock'), ('brace}only')) AS v(k);
SELECT count(*) AS held FROM redis_locks();
SELECT key FROM redis_locks() ORDER BY key COLLATE "C";
\! redis-cli -p $REDIS_PORT EXISTS 'key with spaces' '100% sure %s %d' 'ключ-キー-🔒' '{tag}lock'
-- fencing tokens beside them: {slot tag}:fence:<key>, braces in keys or not
\! redis-cli -p $REDIS_PORT --scan --pattern '{*}:fence:*' | LC_ALL=C sort | grep -e '}lock$' -e 'only$' -e '🔒$'

-- a key of a few kilobytes
SELECT redis_lock_acquire_session(repeat('k', 4000)) AS long_key;
SELECT length(key) FROM redis_locks() WHERE length(key) > 100;
SELECT redis_lock_release(repeat('k', 4000));

SELECT redis_stock_set(E'sku\n1 %d', 2);
SELECT redis_stock_decr(E'sku\n1 %d');
SELECT redis_stock_get(E'sku\n1 %d');

SELECT redis_lock_release_all();
\set VERBOSITY default
