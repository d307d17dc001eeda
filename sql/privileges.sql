-- Using a server needs USAGE; administration and credentials stay hidden.
CREATE ROLE regress_rl_user;
CREATE ROLE regress_rl_admin;
SET ROLE regress_rl_user;
SELECT redis_lock_acquire('priv:k');
SELECT redis_stock_decr('priv:s');
RESET ROLE;

GRANT USAGE ON FOREIGN SERVER redislock TO regress_rl_user;
CREATE USER MAPPING FOR regress_rl_admin SERVER redislock
  OPTIONS (password 'hidden-secret');
SET ROLE regress_rl_user;
SELECT redis_lock_acquire('priv:k');
SELECT redis_stock_set('priv:s', 5);
SELECT redis_stock_incr('priv:s');
-- ordinary users cannot move the server or read passwords
ALTER SERVER redislock OPTIONS (SET host '10.0.0.1');
CREATE SERVER regress_probe FOREIGN DATA WRAPPER redislock
  OPTIONS (host '10.0.0.1');
SELECT umoptions FROM pg_user_mappings WHERE usename = 'regress_rl_admin';
SELECT count(*) FROM pg_user_mapping;
RESET ROLE;

-- stock administration can be granted
GRANT EXECUTE ON FUNCTION redis_stock_set(text, bigint) TO regress_rl_user;
SET ROLE regress_rl_user;
SELECT redis_stock_set('priv:s', 5);
SELECT redis_stock_decr('priv:s');
RESET ROLE;

-- the extension is not trusted
SELECT DISTINCT trusted FROM pg_available_extension_versions WHERE name = 'redislock';

DROP USER MAPPING FOR regress_rl_admin SERVER redislock;
REVOKE ALL ON FUNCTION redis_stock_set(text, bigint) FROM regress_rl_user;
REVOKE USAGE ON FOREIGN SERVER redislock FROM regress_rl_user;
DROP ROLE regress_rl_user;
DROP ROLE regress_rl_admin;
