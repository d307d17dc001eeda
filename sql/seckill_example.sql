-- The seckill example of the README, run for real.
\i examples/seckill.sql
SELECT redis_stock_set('seckill:stock:phone', 2);

CALL seckill_order('phone', 'alice');
CALL seckill_order('phone', 'bob');
CALL seckill_order('phone', 'carol');

-- a second order by the same buyer fails; the unit comes back
SELECT redis_stock_incr('seckill:stock:phone', 1);
CALL seckill_order('phone', 'alice');
SELECT redis_stock_get('seckill:stock:phone') AS stock_after_failed_order;

CALL seckill_order('phone', 'dave');
SELECT redis_stock_get('seckill:stock:phone') AS stock;
SELECT item, buyer, qty FROM seckill_orders ORDER BY id;
SELECT count(*) AS locks_left FROM redis_locks();

DROP PROCEDURE seckill_order;
DROP TABLE seckill_orders;
