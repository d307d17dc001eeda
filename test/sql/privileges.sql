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

-- USAGE, once found, is asked again after any change that may take it away
SET ROLE regress_rl_user;
SELECT redis_stock_get('priv:s') >= 0 AS allowed;
RESET ROLE;
REVOKE USAGE ON FOREIGN SERVER redislock FROM regress_rl_user;
SET ROLE regress_rl_user;
SELECT redis_stock_get('priv:s');
RESET ROLE;
CREATE ROLE regress_rl_buyers;
GRANT USAGE ON FOREIGN SERVER redislock TO regress_rl_buyers;
GRANT regress_rl_buyers TO regress_rl_user;
SET ROLE regress_rl_user;
SELECT redis_stock_get('priv:s') >= 0 AS allowed_as_member;
RESET ROLE;
-- from PostgreSQL 16 on, NOINHERIT leaves the grants made before it
-- inherited (privileges_1.out)
ALTER ROLE regress_rl_user NOINHERIT;
SET ROLE regress_rl_user;
SELECT redis_stock_get('priv:s');
RESET ROLE;
ALTER ROLE regress_rl_user INHERIT;
REVOKE regress_rl_buyers FROM regress_rl_user;
SET ROLE regress_rl_user;
SELECT redis_stock_get('priv:s');
RESET ROLE;
-- a SECURITY DEFINER function uses its owner's privileges, not the caller's
CREATE FUNCTION regress_rl_owned_get() RETURNS bigint
  LANGUAGE sql SECURITY DEFINER AS $$ SELECT redis_stock_get('priv:s') $$;
ALTER FUNCTION regress_rl_owned_get() OWNER TO regress_rl_user;
SELECT redis_stock_get('priv:s') >= 0 AS allowed_as_superuser;
SELECT regress_rl_owned_get();
DROP FUNCTION regress_rl_owned_get();
REVOKE USAGE ON FOREIGN SERVER redislock FROM regress_rl_buyers;
DROP ROLE regress_rl_buyers;
GRANT USAGE ON FOREIGN SERVER redislock TO regress_rl_user;

-- the extension is not trusted
SELECT DISTINCT trusted FROM pg_available_extension_versions WHERE name = 'redislock';

DROP USER MAPPING FOR regress_rl_admin SERVER redislock;
REVOKE ALL ON FUNCTION redis_stock_set(text, bigint) FROM regress_rl_user;
REVOKE USAGE ON FOREIGN SERVER redislock FROM regress_rl_user;
DROP ROLE regress_rl_user;
DROP ROLE regress_rl_admin;
