-- Stock is decremented atomically and given back on rollback.
SELECT redis_stock_set('stock:sku1', 3);
SELECT redis_stock_get('stock:sku1');
SELECT redis_stock_get('stock:absent');

SELECT redis_stock_decr('stock:sku1');
SELECT redis_stock_decr('stock:sku1', 2);
-- too few left: -1 and nothing changes
SELECT redis_stock_decr('stock:sku1');
SELECT redis_stock_get('stock:sku1');

SELECT redis_stock_incr('stock:sku1', 10);
SELECT redis_stock_incr('stock:sku1');
SELECT redis_stock_decr('stock:sku1', 12);
SELECT redis_stock_decr('stock:sku1', 12);
SELECT redis_stock_get('stock:sku1');
SELECT redis_stock_incr('stock:new', 4) AS created;

-- rollback gives the units back
SELECT redis_stock_set('stock:sku2', 10);
BEGIN;
SELECT redis_stock_decr('stock:sku2', 3);
SELECT redis_stock_decr('stock:sku2', 2);
SELECT redis_stock_get('stock:sku2');
ROLLBACK;
SELECT redis_stock_get('stock:sku2');

-- an error rolls back too
BEGIN;
SELECT redis_stock_decr('stock:sku2', 4);
SELECT 1 / 0;
COMMIT;
SELECT redis_stock_get('stock:sku2');

-- commit keeps the decrement
BEGIN;
SELECT redis_stock_decr('stock:sku2', 4);
COMMIT;
SELECT redis_stock_get('stock:sku2');

-- savepoints: only what was taken inside the savepoint comes back
BEGIN;
SELECT redis_stock_decr('stock:sku2', 1);
SAVEPOINT sp;
SELECT redis_stock_decr('stock:sku2', 2);
ROLLBACK TO SAVEPOINT sp;
SELECT redis_stock_get('stock:sku2');
SAVEPOINT sp2;
SELECT redis_stock_decr('stock:sku2', 1);
RELEASE SAVEPOINT sp2;
ROLLBACK;
SELECT redis_stock_get('stock:sku2');

-- a read-only transaction may not decrement, nor recover: its row is a
-- write, refused as an INSERT is, before Redis is asked
BEGIN READ ONLY;
SELECT redis_stock_decr('stock:sku2', 1);
ROLLBACK;
BEGIN READ ONLY;
SELECT count(*) FROM redis_stock_recover();
ROLLBACK;
SELECT redis_stock_get('stock:sku2');

-- a failed decrement (too few) has nothing to give back
BEGIN;
SELECT redis_stock_decr('stock:sku2', 100);
ROLLBACK;
SELECT redis_stock_get('stock:sku2');

-- an item deleted before the rollback is not brought back
BEGIN;
SELECT redis_stock_decr('stock:sku2', 1);
\! redis-cli -p $REDIS_PORT DEL stock:sku2 > /dev/null
ROLLBACK;
SELECT redis_stock_get('stock:sku2');

-- big numbers
SELECT redis_stock_set('stock:big', 9000000000000);
SELECT redis_stock_decr('stock:big', 8999999999999);

-- one purchase per buyer: -2 for a second one, stock unchanged
SELECT redis_stock_set('stock:limited', 3);
SELECT redis_stock_decr('stock:limited', 1, 'alice');
SELECT redis_stock_decr('stock:limited', 1, 'alice') AS second_purchase;
SELECT redis_stock_decr('stock:limited', 1, 'bob');
SELECT redis_stock_get('stock:limited');
\! redis-cli -p $REDIS_PORT SMEMBERS "$(redis-cli -p $REDIS_PORT --scan --pattern '{*}:buyers:stock:limited')" | sort
-- without a buyer there is no limit
SELECT redis_stock_decr('stock:limited', 1);
-- sold out beats a new buyer; a repeat buyer is told so first
SELECT redis_stock_decr('stock:limited', 1, 'carol') AS sold_out;
SELECT redis_stock_decr('stock:limited', 1, 'alice') AS repeat_buyer;
-- a rollback gives back both the units and the right to buy
SELECT redis_stock_incr('stock:limited', 2);
BEGIN;
SELECT redis_stock_decr('stock:limited', 2, 'dave');
ROLLBACK;
SELECT redis_stock_get('stock:limited');
SELECT redis_stock_decr('stock:limited', 2, 'dave') AS dave_again;
SELECT redis_stock_incr('stock:limited', 1);
BEGIN;
SAVEPOINT sp;
SELECT redis_stock_decr('stock:limited', 1, 'erin');
ROLLBACK TO SAVEPOINT sp;
SELECT redis_stock_decr('stock:limited', 1, 'erin') AS erin_again;
COMMIT;
SELECT redis_stock_decr('stock:limited', 1, '');
SELECT redis_stock_decr('stock:limited', 1, NULL) AS null_buyer_is_no_limit;

-- a quantity set during a sale is exact: a pending decrement that rolls
-- back gives back its buyer's right to buy, not its units, and one that
-- commits does not take from it
SELECT redis_stock_set('stock:restocked', 10);
BEGIN;
SELECT redis_stock_decr('stock:restocked', 3, 'frank');
SELECT redis_stock_decr('stock:restocked', 2);
SELECT redis_stock_set('stock:restocked', 100);
ROLLBACK;
SELECT redis_stock_get('stock:restocked') AS exactly_set;
SELECT redis_stock_decr('stock:restocked', 1, 'frank') AS frank_again;
BEGIN;
SELECT redis_stock_decr('stock:restocked', 4, 'gina');
SAVEPOINT sp;
SELECT redis_stock_decr('stock:restocked', 5, 'hal');
SELECT redis_stock_set('stock:restocked', 50);
ROLLBACK TO SAVEPOINT sp;
COMMIT;
SELECT redis_stock_get('stock:restocked') AS still_exactly_set;
SELECT redis_stock_decr('stock:restocked', 1, 'gina') AS gina_again;
SELECT redis_stock_decr('stock:restocked', 1, 'hal') AS hal_again;

-- a transaction that decrements more items than a backend keeps the keys
-- of gives each back by its own keys, and so does the next one
SELECT count(redis_stock_set('stock:many:' || i, 5)) FROM generate_series(1, 40) i;
BEGIN;
SELECT sum(redis_stock_decr('stock:many:' || i, 2)) AS left_in_20
  FROM generate_series(1, 20) i;
ROLLBACK;
BEGIN;
SELECT sum(redis_stock_decr('stock:many:' || i, 1)) AS left_in_40
  FROM generate_series(1, 40) i;
ROLLBACK;
SELECT sum(redis_stock_decr('stock:many:' || i, 3)) AS left_after_commit
  FROM generate_series(1, 40) i;
SELECT sum(redis_stock_get('stock:many:' || i)) AS left_exactly
  FROM generate_series(1, 40) i;
