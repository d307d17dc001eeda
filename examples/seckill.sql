-- A flash-sale ("seckill") order, as a stored procedure.
--
-- Stock lives in Redis, where thousands of buyers can take units per second
-- without queueing on a row lock; orders live in PostgreSQL.  The Redis
-- decrement is tied to the transaction: if anything after it fails (the
-- order insert, a constraint, the payment), the units and the buyer's right
-- to buy go back to Redis.  A per-buyer lock makes a double click wait for
-- the first attempt instead of racing it.

CREATE TABLE seckill_orders (
    id          bigserial PRIMARY KEY,
    item        text        NOT NULL,
    buyer       text        NOT NULL,
    qty         bigint      NOT NULL CHECK (qty > 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (item, buyer)        -- one order per buyer and item
);

-- Attempts that failed after taking stock, whose units were given back.
CREATE TABLE seckill_failures (
    item        text        NOT NULL,
    buyer       text        NOT NULL,
    reason      text        NOT NULL,
    failed_at   timestamptz NOT NULL DEFAULT now()
);

-- The payment step; replace it with the real one.  An error here undoes
-- the order and gives the stock back.
CREATE FUNCTION seckill_charge(buyer text, item text, qty bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    NULL;
END
$$;

-- result is 'ok', 'sold out', 'already bought', 'busy' or 'failed: <why>'.
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

    -- The block is a subtransaction: if anything in it fails, its rollback
    -- gives the units and the buyer's right to buy back to Redis.
    BEGIN
        remaining := redis_stock_decr('seckill:stock:' || item, qty, buyer);
        IF remaining = -1 THEN
            result := 'sold out';
            RETURN;
        ELSIF remaining = -2 THEN
            result := 'already bought';
            RETURN;
        END IF;

        INSERT INTO seckill_orders (item, buyer, qty)
        VALUES (seckill_order.item, seckill_order.buyer, seckill_order.qty);
        PERFORM seckill_charge(buyer, item, qty);
        result := 'ok';
    EXCEPTION WHEN OTHERS THEN
        INSERT INTO seckill_failures (item, buyer, reason)
        VALUES (seckill_order.item, seckill_order.buyer, SQLERRM);
        result := 'failed: ' || SQLERRM;
    END;
END
$$;
