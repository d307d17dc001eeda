-- Flash sale, part 2: what happened.  Run by scripts/demo with -v units=N.
SELECT :units AS units,
       :units - redis_stock_get('seckill:stock:phone') AS sold,
       (SELECT count(*) FROM seckill_orders) AS orders,
       redis_stock_get('seckill:stock:phone') AS remaining,
       (SELECT count(*) FROM seckill_failures) AS compensated,
       GREATEST((SELECT coalesce(sum(qty), 0) FROM seckill_orders) - :units, 0)
         AS oversold
\gset
\echo
\echo 'flash sale of' :units 'units'
\echo '  sold        ' :sold
\echo '  orders      ' :orders
\echo '  remaining   ' :remaining
\echo '  compensated ' :compensated '(attempts that failed after taking a unit; unit given back)'
\echo '  oversold    ' :oversold
SELECT count(DISTINCT buyer) = count(*) AS one_order_per_buyer,
       :sold = :orders AS sold_equals_orders,
       :oversold = 0 AND :remaining >= 0 AS nothing_oversold
  FROM seckill_orders;
