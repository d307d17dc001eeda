-- Transaction-scoped locks end with the transaction or its savepoint.
\set VERBOSITY terse

-- released after commit
BEGIN;
SELECT redis_lock_acquire('xact:a');
\! redis-cli -p $REDIS_PORT EXISTS xact:a
SELECT key, scope, holds FROM redis_locks();
COMMIT;
\! redis-cli -p $REDIS_PORT EXISTS xact:a
SELECT count(*) FROM redis_locks();

-- released at rollback, and at an error
BEGIN;
SELECT redis_lock_acquire('xact:b');
ROLLBACK;
\! redis-cli -p $REDIS_PORT EXISTS xact:b
BEGIN;
SELECT redis_lock_acquire('xact:b');
SELECT 1 / 0;
ROLLBACK;
\! redis-cli -p $REDIS_PORT EXISTS xact:b

-- one statement is one transaction
SELECT redis_lock_acquire('xact:c');
\! redis-cli -p $REDIS_PORT EXISTS xact:c

-- savepoints: a rollback to savepoint releases what was taken inside it
BEGIN;
SELECT redis_lock_acquire('xact:outer');
SAVEPOINT sp1;
SELECT redis_lock_acquire('xact:inner');
SELECT redis_lock_acquire('xact:outer');
SELECT key, holds FROM redis_locks() ORDER BY key;
ROLLBACK TO SAVEPOINT sp1;
SELECT key, holds FROM redis_locks() ORDER BY key;
\! redis-cli -p $REDIS_PORT EXISTS xact:inner xact:outer
-- a released savepoint passes its holds to the parent
SAVEPOINT sp2;
SELECT redis_lock_acquire('xact:kept');
SAVEPOINT sp3;
SELECT redis_lock_acquire('xact:kept');
RELEASE SAVEPOINT sp3;
RELEASE SAVEPOINT sp2;
SAVEPOINT sp4;
ROLLBACK TO SAVEPOINT sp4;
SELECT key, holds FROM redis_locks() ORDER BY key;
COMMIT;
\! redis-cli -p $REDIS_PORT EXISTS xact:kept xact:outer
SELECT count(*) FROM redis_locks();

-- PL/pgSQL exception blocks are subtransactions too
DO $$
BEGIN
  PERFORM redis_lock_acquire('xact:plpgsql');
  BEGIN
    PERFORM redis_lock_acquire('xact:in_block');
    RAISE EXCEPTION 'fail';
  EXCEPTION WHEN raise_exception THEN
    RAISE NOTICE 'held: %', (SELECT string_agg(key, ',' ORDER BY key) FROM redis_locks());
  END;
END
$$;

-- before commit the lease is confirmed and renewed to cover the commit
-- (a session hold keeps the key after commit, so the renewal shows)
BEGIN;
SELECT redis_lock_acquire('xact:renew', 5000);
SELECT redis_lock_acquire_session('xact:renew', 5000);
\! redis-cli -p $REDIS_PORT PEXPIRE xact:renew 1000 > /dev/null
COMMIT;
\! redis-cli -p $REDIS_PORT PTTL xact:renew | awk '{ print ($1 > 3000) ? "renewed at commit" : "ttl " $1 }'
SELECT redis_lock_release('xact:renew');

-- a lease lost before commit aborts the commit
BEGIN;
CREATE TEMP TABLE xact_written (v int);
SELECT redis_lock_acquire('xact:lost', 100);
SELECT pg_sleep(0.3);
\! redis-cli -p $REDIS_PORT SET xact:lost intruder NX PX 60000 > /dev/null
INSERT INTO xact_written VALUES (1);
COMMIT;
SELECT count(*) FROM pg_class WHERE relname = 'xact_written';
\! redis-cli -p $REDIS_PORT GET xact:lost

-- ... unless the check is turned off
SET redislock.verify_before_commit = off;
BEGIN;
SELECT redis_lock_acquire('xact:lost2', 100);
SELECT pg_sleep(0.3);
\! redis-cli -p $REDIS_PORT SET xact:lost2 intruder NX PX 60000 > /dev/null
COMMIT;
\! redis-cli -p $REDIS_PORT GET xact:lost2
RESET redislock.verify_before_commit;

-- a session hold on a lock lost before commit outlives the abort, and
-- release_all still ends it (reporting the lost lease)
BEGIN;
SELECT redis_lock_acquire_session('xact:lost3', 100), redis_lock_acquire('xact:lost3', 100);
SELECT pg_sleep(0.3);
\! redis-cli -p $REDIS_PORT SET xact:lost3 intruder NX PX 60000 > /dev/null
COMMIT;
SELECT key, scope, holds FROM redis_locks();
SELECT redis_lock_release_all();
SELECT count(*) FROM redis_locks();
\! redis-cli -p $REDIS_PORT GET xact:lost3
\! redis-cli -p $REDIS_PORT DEL xact:lost xact:lost2 xact:lost3 > /dev/null

-- PREPARE TRANSACTION is refused while Redis state is tied to it
BEGIN;
SELECT redis_lock_acquire('xact:2pc');
PREPARE TRANSACTION 'regress_redislock';
\! redis-cli -p $REDIS_PORT EXISTS xact:2pc
SELECT count(*) FROM pg_prepared_xacts;
BEGIN;
SELECT redis_stock_set('xact:2pc_stock', 5);
SELECT redis_stock_decr('xact:2pc_stock');
PREPARE TRANSACTION 'regress_redislock';
SELECT redis_stock_get('xact:2pc_stock');
-- session locks do not stop it: the PREPARE fails only where prepared
-- transactions are disabled (max_prepared_transactions = 0, the default;
-- transactions_1.out is the output where they are enabled)
SELECT redis_lock_acquire_session('xact:session');
BEGIN;
PREPARE TRANSACTION 'regress_redislock';
SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'regress_redislock';
ROLLBACK PREPARED 'regress_redislock';
SELECT redis_lock_release('xact:session');

-- release_all also ends transaction holds
BEGIN;
SELECT redis_lock_acquire('xact:all1'), redis_lock_acquire_session('xact:all2');
SELECT redis_lock_release_all();
SELECT count(*) FROM redis_locks();
COMMIT;
\set VERBOSITY default
