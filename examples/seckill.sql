-- A flash-sale ("seckill") order, as a stored procedure.
--
-- Stock lives in Redis, where thousands of buyers can take units per second
-- without queueing on a row lock; orders live in PostgreSQL.  The Redis
-- decrement is tied to the transaction: if anything after it fails (the
-- order insert, a constraint, the caller's own checks), the transaction
-- rolls back and the units go back to Redis.  A per-buyer lock makes a
-- double click wait for the first attempt instead of racing it.

CREATE TABLE seckill_orders (
    id          bigserial PRIMARY KEY,
    item        text        NOT NULL,
    buyer       text        NOT NULL,
    qty         bigint      NOT NULL CHECK (qty > 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (item, buyer)        -- one order per buyer and item
);

-- result is 'ok', 'sold out' or 'busy'; errors (such as a second order by
-- the same buyer) roll the whole attempt back, stock included.
CREATE PROCEDURE seckill_order(item text, buyer text, qty bigint DEFAULT 1,
                               INOUT result text DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    remaining bigint;
BEGIN
    -- one attempt at a time per buyer; released when the transaction ends
    IF NOT redis_lock_acquire('seckill:buyer:' || buyer, 5000, 1000) THEN
        result := 'busy';
        RETURN;
    END IF;

    remaining := redis_stock_decr('seckill:stock:' || item, qty);
    IF remaining < 0 THEN
        result := 'sold out';
        RETURN;
    END IF;

    INSERT INTO seckill_orders (item, buyer, qty)
    VALUES (seckill_order.item, seckill_order.buyer, seckill_order.qty);
    result := 'ok';
END
$$;
