-- The seckill example of the README, run for real.
\i examples/seckill.sql
SELECT redis_stock_set('seckill:stock:phone', 2);

CALL seckill_order('phone', 'alice');
CALL seckill_order('phone', 'alice');
CALL seckill_order('phone', 'bob');
CALL seckill_order('phone', 'carol');

-- a failed payment undoes the order and gives the unit and the right back
SELECT redis_stock_incr('seckill:stock:phone', 1);
CREATE OR REPLACE FUNCTION seckill_charge(buyer text, item text, qty bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF buyer = 'dave' THEN
        RAISE EXCEPTION 'payment declined';
    END IF;
END
$$;
CALL seckill_order('phone', 'dave');
SELECT redis_stock_get('seckill:stock:phone') AS stock_after_failed_payment;
\! redis-cli -p $REDIS_PORT SISMEMBER "$(redis-cli -p $REDIS_PORT --scan --pattern '{*}:buyers:seckill:stock:phone')" dave
CALL seckill_order('phone', 'erin');
SELECT redis_stock_get('seckill:stock:phone') AS stock;

SELECT item, buyer, qty FROM seckill_orders ORDER BY id;
SELECT item, buyer, reason FROM seckill_failures;
SELECT count(*) AS locks_left FROM redis_locks();

DROP PROCEDURE seckill_order;
DROP FUNCTION seckill_charge;
DROP TABLE seckill_orders, seckill_failures;
