-- Flash sale, part 1: the shop.  Run by scripts/demo with -v units=N.
\i examples/seckill.sql

-- The payment provider declines one attempt in five: those orders are
-- undone and their units given back to Redis.
CREATE OR REPLACE FUNCTION seckill_charge(buyer text, item text, qty bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF random() < 0.2 THEN
        RAISE EXCEPTION 'payment declined';
    END IF;
END
$$;

SELECT redis_stock_set('seckill:stock:phone', :units) \g /dev/null
