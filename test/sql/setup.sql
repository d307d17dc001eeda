-- Create the extension and point its server at the test Redis, which
-- REDIS_HOST (default 127.0.0.1) and REDIS_PORT name.
\set redis_host `echo "${REDIS_HOST:-127.0.0.1}"`
\set redis_port `echo "$REDIS_PORT"`
CREATE EXTENSION redislock;
ALTER SERVER redislock OPTIONS (SET host :'redis_host', SET port :'redis_port');

-- what the extension made
SELECT fdwname, fdwvalidator::regproc FROM pg_foreign_data_wrapper
 WHERE fdwname = 'redislock';
SELECT srvname, array_length(srvoptions, 1) AS noptions FROM pg_foreign_server
 WHERE srvname = 'redislock';
SELECT extrelocatable FROM pg_extension WHERE extname = 'redislock';
SELECT name, setting, unit, context FROM pg_settings
 WHERE name LIKE 'redislock.%' ORDER BY name;

-- the first call connects; nobody holds anything yet
SELECT redis_lock_acquire('setup:hello');
SELECT key, scope, holds FROM redis_locks();

-- The SQLSTATE and message of the error a query raises, for the tests that
-- check that bad input is refused
CREATE FUNCTION regress_refusal(query text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE query;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ' ' || SQLERRM;
END $$;
