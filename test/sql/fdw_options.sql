-- The validator accepts the documented options and rejects anything else.
CREATE SERVER regress_redis FOREIGN DATA WRAPPER redislock
  OPTIONS (host 'localhost', port '6380', database '3', key_prefix 'app:');
ALTER SERVER regress_redis OPTIONS (SET port '65535');

-- bad values
ALTER SERVER regress_redis OPTIONS (SET port '0');
ALTER SERVER regress_redis OPTIONS (SET port '65536');
ALTER SERVER regress_redis OPTIONS (SET port '12ab');
ALTER SERVER regress_redis OPTIONS (SET database '-1');
ALTER SERVER regress_redis OPTIONS (SET host '');
ALTER SERVER regress_redis OPTIONS (ADD unix_socket '/tmp/redis.sock');
CREATE SERVER regress_bad FOREIGN DATA WRAPPER redislock OPTIONS (hots 'x');
CREATE SERVER regress_bad FOREIGN DATA WRAPPER redislock
  OPTIONS (password 'secret');
ALTER FOREIGN DATA WRAPPER redislock OPTIONS (ADD host 'x');

-- user mappings take credentials only
CREATE USER MAPPING FOR PUBLIC SERVER regress_redis
  OPTIONS (host 'elsewhere');
CREATE USER MAPPING FOR PUBLIC SERVER regress_redis
  OPTIONS (username 'app');
CREATE USER MAPPING FOR PUBLIC SERVER regress_redis
  OPTIONS (username 'app', password 'secret');
ALTER USER MAPPING FOR PUBLIC SERVER regress_redis
  OPTIONS (SET username '');

-- a unix socket instead of a host
ALTER SERVER regress_redis OPTIONS (DROP host, ADD unix_socket '/tmp/r.sock');
SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'regress_redis';

-- a Redis Cluster: seed nodes instead of host, port and unix_socket
CREATE SERVER regress_cluster FOREIGN DATA WRAPPER redislock
  OPTIONS (cluster '10.0.0.1:7000, 10.0.0.2:7001,[::1]:7002', database '0');
ALTER SERVER regress_cluster OPTIONS (SET cluster '10.0.0.1:7000,');
ALTER SERVER regress_cluster OPTIONS (SET cluster '10.0.0.1');
ALTER SERVER regress_cluster OPTIONS (SET cluster '10.0.0.1:70000');
ALTER SERVER regress_cluster OPTIONS (SET cluster '');
ALTER SERVER regress_cluster OPTIONS (ADD host 'x');
ALTER SERVER regress_cluster OPTIONS (ADD port '6379');
ALTER SERVER regress_cluster OPTIONS (SET database '1');
SELECT endpoint, role, slots, connected
  FROM redis_server_nodes('regress_cluster');
SELECT endpoint, role, slots, connected
  FROM redis_server_nodes('regress_redis');
DROP SERVER regress_cluster;

-- Sentinel: Sentinels and the master's name, with their own credentials
CREATE SERVER regress_sentinel FOREIGN DATA WRAPPER redislock
  OPTIONS (sentinel '10.0.0.1:26379, 10.0.0.2:26379',
           sentinel_master 'mymaster', min_replicas '1',
           replica_timeout '200');
CREATE USER MAPPING FOR PUBLIC SERVER regress_sentinel
  OPTIONS (password 'secret', sentinel_username 's', sentinel_password 'x');
ALTER USER MAPPING FOR PUBLIC SERVER regress_sentinel
  OPTIONS (DROP sentinel_password);
ALTER SERVER regress_sentinel OPTIONS (DROP sentinel_master);
ALTER SERVER regress_sentinel OPTIONS (ADD host 'x');
ALTER SERVER regress_sentinel OPTIONS (ADD cluster '10.0.0.1:7000');
ALTER SERVER regress_sentinel OPTIONS (ADD sentinel_password 'x');
ALTER SERVER regress_sentinel OPTIONS (SET min_replicas '-1');
ALTER SERVER regress_sentinel OPTIONS (SET replica_timeout '0');
SELECT endpoint, role, slots, connected
  FROM redis_server_nodes('regress_sentinel');
DROP SERVER regress_sentinel CASCADE;

-- Redlock: at least three independent masters
CREATE SERVER regress_redlock FOREIGN DATA WRAPPER redislock
  OPTIONS (redlock '10.0.0.1:6379, 10.0.0.2:6379, 10.0.0.3:6379');
ALTER SERVER regress_redlock
  OPTIONS (SET redlock '10.0.0.1:6379, 10.0.0.2:6379');
ALTER SERVER regress_redlock OPTIONS (ADD port '6379');
ALTER SERVER regress_redlock OPTIONS (ADD min_replicas '1');
SELECT endpoint, role, slots, connected
  FROM redis_server_nodes('regress_redlock');
DROP SERVER regress_redlock;

-- a server of another wrapper cannot be used
CREATE FOREIGN DATA WRAPPER regress_other;
CREATE SERVER regress_other_srv FOREIGN DATA WRAPPER regress_other;
SET redislock.server = 'regress_other_srv';
SELECT redis_lock_acquire('fdw:x');
SET redislock.server = 'regress_missing';
SELECT redis_lock_acquire('fdw:x');
RESET redislock.server;

-- a key prefix namespaces every key of a server; this one reaches the test
-- Redis as the server redislock does (setup)
SELECT max(option_value) FILTER (WHERE option_name = 'host') AS host,
       max(option_value) FILTER (WHERE option_name = 'port') AS port
  FROM pg_foreign_server, pg_options_to_table(srvoptions)
 WHERE srvname = 'redislock' \gset redis_
CREATE SERVER regress_prefixed FOREIGN DATA WRAPPER redislock
  OPTIONS (host :'redis_host', port :'redis_port', key_prefix 'tenant1:');
SET redislock.server = 'regress_prefixed';
SELECT redis_stock_set('fdw:item', 7);
SELECT redis_stock_get('fdw:item');
RESET redislock.server;
SELECT redis_stock_get('tenant1:fdw:item') AS seen_without_prefix;
SELECT redis_stock_get('fdw:item') AS other_namespace;

-- changing the prefix takes effect on the next call
ALTER SERVER regress_prefixed OPTIONS (SET key_prefix 'tenant2:');
SET redislock.server = 'regress_prefixed';
SELECT redis_stock_get('fdw:item') AS after_prefix_change;
RESET redislock.server;

-- unknown settings in our namespace are refused (from PostgreSQL 15 on:
-- fdw_options_1.out has 13 and 14, which accept them)
SET redislock.no_such_setting = 1;

DROP SERVER regress_other_srv;
DROP FOREIGN DATA WRAPPER regress_other;
DROP SERVER regress_prefixed;
DROP SERVER regress_redis CASCADE;
