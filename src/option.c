/*-------------------------------------------------------------------------
 *
 * option.c
 *		Validator of the options of the redislock foreign data wrapper.
 *
 * Servers say where Redis is and which key prefix confines their users;
 * user mappings carry Redis ACL credentials, which pg_user_mappings hides
 * from everyone but their owner.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "catalog/pg_foreign_data_wrapper.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_user_mapping.h"
#include "commands/defrem.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"

#include "redislock.h"

typedef struct RedisOption
{
	const char *name;
	Oid			context;		/* catalog the option belongs to */
} RedisOption;

static const RedisOption valid_options[] = {
	{"host", ForeignServerRelationId},
	{"port", ForeignServerRelationId},
	{"unix_socket", ForeignServerRelationId},
	{"cluster", ForeignServerRelationId},
	{"sentinel", ForeignServerRelationId},
	{"sentinel_master", ForeignServerRelationId},
	{"redlock", ForeignServerRelationId},
	{"min_replicas", ForeignServerRelationId},
	{"replica_timeout", ForeignServerRelationId},
	{"database", ForeignServerRelationId},
	{"key_prefix", ForeignServerRelationId},
	{"username", UserMappingRelationId},
	{"password", UserMappingRelationId},
	{"sentinel_username", UserMappingRelationId},
	{"sentinel_password", UserMappingRelationId},
};

PG_FUNCTION_INFO_V1(redislock_fdw_validator);

static bool
is_valid_option(const char *name, Oid context)
{
	int			i;

	for (i = 0; i < lengthof(valid_options); i++)
		if (valid_options[i].context == context &&
			strcmp(valid_options[i].name, name) == 0)
			return true;
	return false;
}

/* Reject an unknown option, listing the ones this object takes */
static void
reject_unknown_option(const char *name, Oid context)
{
	StringInfoData buf;
	int			i;

	initStringInfo(&buf);
	for (i = 0; i < lengthof(valid_options); i++)
	{
		if (valid_options[i].context != context)
			continue;
		if (buf.len > 0)
			appendStringInfoString(&buf, ", ");
		appendStringInfoString(&buf, valid_options[i].name);
	}

	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
			 errmsg("invalid option \"%s\"", name),
			 buf.len > 0
			 ? errhint("Valid options in this context are: %s", buf.data)
			 : errhint("There are no valid options in this context.")));
}

/* An integer option within [min, max] */
static void
check_int_option(DefElem *def, int min, int max)
{
	char	   *value = defGetString(def);
	char	   *end;
	long		number;

	errno = 0;
	number = strtol(value, &end, 10);
	if (errno != 0 || end == value || *end != '\0' ||
		number < min || number > max)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"%s\": \"%s\"",
						def->defname, value),
				 errdetail("Valid values are integers from %d to %d.",
						   min, max)));
}

static void
check_nonempty_option(DefElem *def)
{
	if (defGetString(def)[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("option \"%s\" must not be empty", def->defname)));
}

/*
 * A key prefix must keep every key's siblings in its Redis Cluster slot: a
 * hash tag that the prefix opens must also close in it.
 */
static void
check_key_prefix(DefElem *def)
{
	if (!redis_prefix_is_valid(defGetString(def)))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"key_prefix\": \"%s\"",
						defGetString(def)),
				 errdetail("A \"{\" in the key prefix must open a complete, non-empty hash tag, such as \"{shop}:\"."),
				 errhint("Keys under the prefix would not share a Redis Cluster hash slot with the keys kept beside them.")));
}

/* A list of "host:port" endpoints, at least one */
static void
check_endpoints_option(DefElem *def)
{
	const char *bad_entry;

	if (redis_parse_endpoints(defGetString(def), &bad_entry) == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"%s\": \"%s\"",
						def->defname, defGetString(def)),
				 errdetail("Entry \"%s\" is not of the form host:port.",
						   bad_entry),
				 errhint("List nodes as \"host:port, host:port\".")));
}

/* Redlock needs at least three independent masters */
static void
check_redlock_option(DefElem *def)
{
	const char *bad_entry;

	check_endpoints_option(def);
	if (list_length(redis_parse_endpoints(defGetString(def), &bad_entry)) < 3)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"redlock\": \"%s\"",
						defGetString(def)),
				 errdetail("Redlock needs at least 3 independent masters; an odd number is best.")));
}

/* Options that say where one Redis is cannot go with a list of nodes */
static void
check_exclusive_with(const char *list_option, bool has_host, bool has_port,
					 bool has_socket)
{
	if (has_host || has_port || has_socket)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
				 errmsg("option \"%s\" cannot be combined with option \"%s\"",
						list_option,
						has_host ? "host" : has_port ? "port" : "unix_socket")));
}

/*
 * Validate the options of a foreign data wrapper, server or user mapping.
 * It sees the complete option list after CREATE or ALTER, so options that
 * exclude each other can be checked here.
 */
Datum
redislock_fdw_validator(PG_FUNCTION_ARGS)
{
	List	   *options = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			context = PG_GETARG_OID(1);
	bool		has_host = false;
	bool		has_port = false;
	bool		has_socket = false;
	bool		has_cluster = false;
	bool		has_sentinel = false;
	bool		has_redlock = false;
	bool		has_min_replicas = false;
	bool		has_sentinel_master = false;
	bool		has_sentinel_username = false;
	bool		has_sentinel_password = false;
	int			database = 0;
	bool		has_username = false;
	bool		has_password = false;
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);

		if (!is_valid_option(def->defname, context))
			reject_unknown_option(def->defname, context);

		if (strcmp(def->defname, "port") == 0)
		{
			check_int_option(def, 1, 65535);
			has_port = true;
		}
		else if (strcmp(def->defname, "database") == 0)
		{
			check_int_option(def, 0, 65535);
			database = atoi(defGetString(def));
		}
		else if (strcmp(def->defname, "cluster") == 0)
		{
			check_endpoints_option(def);
			has_cluster = true;
		}
		else if (strcmp(def->defname, "sentinel") == 0)
		{
			check_endpoints_option(def);
			has_sentinel = true;
		}
		else if (strcmp(def->defname, "sentinel_master") == 0)
		{
			check_nonempty_option(def);
			has_sentinel_master = true;
		}
		else if (strcmp(def->defname, "redlock") == 0)
		{
			check_redlock_option(def);
			has_redlock = true;
		}
		else if (strcmp(def->defname, "min_replicas") == 0)
		{
			check_int_option(def, 0, 1000);
			has_min_replicas = true;
		}
		else if (strcmp(def->defname, "replica_timeout") == 0)
			check_int_option(def, 1, 3600000);
		else if (strcmp(def->defname, "sentinel_username") == 0)
		{
			check_nonempty_option(def);
			has_sentinel_username = true;
		}
		else if (strcmp(def->defname, "sentinel_password") == 0)
			has_sentinel_password = true;
		else if (strcmp(def->defname, "host") == 0)
		{
			check_nonempty_option(def);
			has_host = true;
		}
		else if (strcmp(def->defname, "unix_socket") == 0)
		{
			check_nonempty_option(def);
			has_socket = true;
		}
		else if (strcmp(def->defname, "username") == 0)
		{
			check_nonempty_option(def);
			has_username = true;
		}
		else if (strcmp(def->defname, "password") == 0)
			has_password = true;
		else if (strcmp(def->defname, "key_prefix") == 0)
			check_key_prefix(def);
	}

	if (has_host && has_socket)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
				 errmsg("options \"host\" and \"unix_socket\" cannot both be set")));
	if (has_cluster)
	{
		check_exclusive_with("cluster", has_host, has_port, has_socket);
		if (database != 0)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
					 errmsg("option \"database\" must be 0 for a Redis Cluster server"),
					 errdetail("Redis Cluster has database 0 only.")));
	}
	if (has_sentinel)
	{
		check_exclusive_with("sentinel", has_host, has_port, has_socket);
		if (has_cluster)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
					 errmsg("option \"sentinel\" cannot be combined with option \"cluster\"")));
	}
	if (has_redlock)
	{
		check_exclusive_with("redlock", has_host, has_port, has_socket);
		if (has_cluster || has_sentinel || has_min_replicas)
			ereport(ERROR,
					(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
					 errmsg("option \"redlock\" cannot be combined with option \"%s\"",
							has_cluster ? "cluster" : has_sentinel ? "sentinel" :
							"min_replicas"),
					 has_min_replicas ?
					 errdetail("On a Redlock server the quorum of masters takes the place of replica acknowledgement.") : 0));
	}
	if (has_sentinel != has_sentinel_master)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("options \"sentinel\" and \"sentinel_master\" must be set together"),
				 errdetail("The Sentinels are asked for the master of that name.")));
	if (has_sentinel_username && !has_sentinel_password)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("option \"sentinel_username\" requires option \"sentinel_password\""),
				 errdetail("Redis authenticates a user only with a password.")));
	if (has_username && !has_password)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("option \"username\" requires option \"password\""),
				 errdetail("Redis authenticates a user only with a password.")));

	PG_RETURN_VOID();
}
