/*-------------------------------------------------------------------------
 *
 * option.c
 *		Options of the redislock foreign data wrapper: their validator, and
 *		their reading for the connection cache.
 *
 * Servers say where Redis is and which key prefix confines their users;
 * user mappings carry Redis ACL credentials, which pg_user_mappings hides
 * from everyone but their owner.  A table says which catalog each option
 * belongs to and how its value is checked; the validator and the
 * connection cache read options through it into a RedisServerOptions.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/reloptions.h"
#include "catalog/pg_foreign_server.h"
#include "catalog/pg_user_mapping.h"
#include "commands/defrem.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "port/pg_bitutils.h"

#include "server/server.h"

/* The options, in the order that hints list them */
typedef enum OptionId
{
	OPT_HOST,
	OPT_PORT,
	OPT_UNIX_SOCKET,
	OPT_CLUSTER,
	OPT_SENTINEL,
	OPT_SENTINEL_MASTER,
	OPT_REDLOCK,
	OPT_MIN_REPLICAS,
	OPT_REPLICA_TIMEOUT,
	OPT_DATABASE,
	OPT_KEY_PREFIX,
	OPT_USERNAME,
	OPT_PASSWORD,
	OPT_SENTINEL_USERNAME,
	OPT_SENTINEL_PASSWORD,
	NUM_OPTIONS
} OptionId;

/* A set of options, one bit per OptionId */
#define OPTION_BIT(id)		((uint32) 1 << (id))
#define IS_SET(set, id)		(((set) & OPTION_BIT(id)) != 0)

typedef struct RedisOption
{
	const char *name;
	Oid			context;		/* catalog the option belongs to */
	/* checks a value and stores it in its field of RedisServerOptions */
	void		(*read) (const struct RedisOption *option, DefElem *def,
						 void *field);
	size_t		field;			/* offset in RedisServerOptions */
	int			min;			/* int_option(): the values allowed */
	int			max;
} RedisOption;

/* Any string: a password */
static void
string_option(const RedisOption *option, DefElem *def, void *field)
{
	*(const char **) field = defGetString(def);
}

/* A host, a socket or a name: an empty one would only fail later */
static void
nonempty_option(const RedisOption *option, DefElem *def, void *field)
{
	char	   *value = defGetString(def);

	if (value[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("option \"%s\" must not be empty", def->defname)));
	*(const char **) field = value;
}

/* An integer within [min, max] */
static void
int_option(const RedisOption *option, DefElem *def, void *field)
{
	char	   *value = defGetString(def);
	char	   *end;
	long		number;

	errno = 0;
	number = strtol(value, &end, 10);
	if (errno != 0 || end == value || *end != '\0' ||
		number < option->min || number > option->max)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"%s\": \"%s\"",
						def->defname, value),
				 errdetail("Valid values are integers from %d to %d.",
						   option->min, option->max)));
	*(int *) field = (int) number;
}

/*
 * A key prefix must keep every key's siblings in its Redis Cluster slot: a
 * hash tag that the prefix opens must also close in it.
 */
static void
key_prefix_option(const RedisOption *option, DefElem *def, void *field)
{
	char	   *value = defGetString(def);

	if (!redis_prefix_is_valid(value))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"key_prefix\": \"%s\"",
						value),
				 errdetail("A \"{\" in the key prefix must open a complete, non-empty hash tag, such as \"{shop}:\"."),
				 errhint("Keys under the prefix would not share a Redis Cluster hash slot with the keys kept beside them.")));
	*(const char **) field = value;
}

/* A list of "host:port" endpoints, at least one */
static void
endpoints_option(const RedisOption *option, DefElem *def, void *field)
{
	const char *bad_entry;
	List	   *endpoints = redis_parse_endpoints(defGetString(def), &bad_entry);

	if (endpoints == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"%s\": \"%s\"",
						def->defname, defGetString(def)),
				 errdetail("Entry \"%s\" is not of the form host:port.",
						   bad_entry),
				 errhint("List nodes as \"host:port, host:port\".")));
	*(List **) field = endpoints;
}

/* Redlock needs at least three independent masters */
static void
masters_option(const RedisOption *option, DefElem *def, void *field)
{
	endpoints_option(option, def, field);
	if (list_length(*(List **) field) < 3)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("invalid value for option \"redlock\": \"%s\"",
						defGetString(def)),
				 errdetail("Redlock needs at least 3 independent masters; an odd number is best.")));
}

#define SERVER		ForeignServerRelationId
#define MAPPING		UserMappingRelationId
#define FIELD(name)	offsetof(RedisServerOptions, name)

/* The options, in OptionId order */
static const RedisOption valid_options[] = {
	{"host", SERVER, nonempty_option, FIELD(host)},
	{"port", SERVER, int_option, FIELD(port), 1, 65535},
	{"unix_socket", SERVER, nonempty_option, FIELD(unix_socket)},
	{"cluster", SERVER, endpoints_option, FIELD(endpoints)},
	{"sentinel", SERVER, endpoints_option, FIELD(endpoints)},
	{"sentinel_master", SERVER, nonempty_option, FIELD(sentinel_master)},
	{"redlock", SERVER, masters_option, FIELD(endpoints)},
	{"min_replicas", SERVER, int_option, FIELD(min_replicas), 0, 1000},
	{"replica_timeout", SERVER, int_option, FIELD(replica_timeout), 1, 3600000},
	{"database", SERVER, int_option, FIELD(database), 0, 65535},
	{"key_prefix", SERVER, key_prefix_option, FIELD(key_prefix)},
	{"username", MAPPING, nonempty_option, FIELD(username)},
	{"password", MAPPING, string_option, FIELD(password)},
	{"sentinel_username", MAPPING, nonempty_option, FIELD(sentinel_username)},
	{"sentinel_password", MAPPING, string_option, FIELD(sentinel_password)},
};

StaticAssertDecl(lengthof(valid_options) == NUM_OPTIONS,
				 "valid_options must have an entry per OptionId");

/* What a server and user mapping without options mean */
static const RedisServerOptions default_options = {
	.kind = REDIS_SERVER_SINGLE,
	.host = "127.0.0.1",
	.port = 6379,
	.key_prefix = "",
	.replica_timeout = 100,
};

PG_FUNCTION_INFO_V1(redislock_fdw_validator);

/*
 * The option of that name in context.  An unknown one is an error that
 * lists the options this object takes.
 */
static int
find_option(const char *name, Oid context)
{
	StringInfoData buf;
	int			id;

	for (id = 0; id < NUM_OPTIONS; id++)
		if (valid_options[id].context == context &&
			strcmp(valid_options[id].name, name) == 0)
			return id;

	initStringInfo(&buf);
	for (id = 0; id < NUM_OPTIONS; id++)
	{
		if (valid_options[id].context != context)
			continue;
		if (buf.len > 0)
			appendStringInfoString(&buf, ", ");
		appendStringInfoString(&buf, valid_options[id].name);
	}
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
			 errmsg("invalid option \"%s\"", name),
			 buf.len > 0
			 ? errhint("Valid options in this context are: %s", buf.data)
			 : errhint("There are no valid options in this context.")));
}

/*
 * Check and store the options of one catalog, in list order, so that the
 * first bad one is the one reported; returns the set of those given.
 */
static uint32
read_options(RedisServerOptions *opts, List *options, Oid context)
{
	uint32		given = 0;
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *def = (DefElem *) lfirst(lc);
		int			id = find_option(def->defname, context);

		valid_options[id].read(&valid_options[id], def,
							   (char *) opts + valid_options[id].field);
		given |= OPTION_BIT(id);
	}
	return given;
}

/*
 * An option that names the nodes of a server excludes those that say where
 * one Redis is, and other kinds of server: report the first of excluded,
 * in table order, that is given with it.
 */
static void
check_excludes(uint32 given, OptionId option, uint32 excluded)
{
	int			other;

	if (!IS_SET(given, option) || (given & excluded) == 0)
		return;
	other = pg_rightmost_one_pos32(given & excluded);
	ereport(ERROR,
			(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
			 errmsg("option \"%s\" cannot be combined with option \"%s\"",
					valid_options[option].name, valid_options[other].name),
			 other == OPT_MIN_REPLICAS ?
			 errdetail("On a Redlock server the quorum of masters takes the place of replica acknowledgement.") : 0));
}

/* A user name goes with a password: Redis's AUTH takes none without one */
static void
check_requires(uint32 given, OptionId option, OptionId required)
{
	if (IS_SET(given, option) && !IS_SET(given, required))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("option \"%s\" requires option \"%s\"",
						valid_options[option].name,
						valid_options[required].name),
				 errdetail("Redis authenticates a user only with a password.")));
}

/*
 * The options that exclude or need each other, checked once the complete
 * list is read: the validator sees it whole after CREATE or ALTER.
 */
static void
check_combinations(const RedisServerOptions *opts, uint32 given)
{
	const uint32 one_redis = OPTION_BIT(OPT_HOST) | OPTION_BIT(OPT_PORT) |
		OPTION_BIT(OPT_UNIX_SOCKET);

	if (IS_SET(given, OPT_HOST) && IS_SET(given, OPT_UNIX_SOCKET))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_OPTION_NAME),
				 errmsg("options \"host\" and \"unix_socket\" cannot both be set")));
	check_excludes(given, OPT_CLUSTER, one_redis);
	if (IS_SET(given, OPT_CLUSTER) && opts->database != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE),
				 errmsg("option \"database\" must be 0 for a Redis Cluster server"),
				 errdetail("Redis Cluster has database 0 only.")));
	check_excludes(given, OPT_SENTINEL, one_redis | OPTION_BIT(OPT_CLUSTER));
	check_excludes(given, OPT_REDLOCK,
				   one_redis | OPTION_BIT(OPT_CLUSTER) |
				   OPTION_BIT(OPT_SENTINEL) | OPTION_BIT(OPT_MIN_REPLICAS));
	if (IS_SET(given, OPT_SENTINEL) != IS_SET(given, OPT_SENTINEL_MASTER))
		ereport(ERROR,
				(errcode(ERRCODE_FDW_OPTION_NAME_NOT_FOUND),
				 errmsg("options \"sentinel\" and \"sentinel_master\" must be set together"),
				 errdetail("The Sentinels are asked for the master of that name.")));
	check_requires(given, OPT_SENTINEL_USERNAME, OPT_SENTINEL_PASSWORD);
	check_requires(given, OPT_USERNAME, OPT_PASSWORD);
}

/*
 * The options of a foreign server and of its user mapping, checked as the
 * validator checks them, with defaults for those not given.  Strings and
 * lists are those of the lists or made in the current memory context.
 */
void
redis_read_options(RedisServerOptions *opts, List *server_options,
				   List *mapping_options)
{
	uint32		given;

	*opts = default_options;
	given = read_options(opts, server_options, SERVER);
	given |= read_options(opts, mapping_options, MAPPING);
	check_combinations(opts, given);

	if (IS_SET(given, OPT_CLUSTER))
		opts->kind = REDIS_SERVER_CLUSTER;
	else if (IS_SET(given, OPT_SENTINEL))
		opts->kind = REDIS_SERVER_SENTINEL;
	else if (IS_SET(given, OPT_REDLOCK))
		opts->kind = REDIS_SERVER_REDLOCK;
}

/*
 * Validate the options of a foreign data wrapper, server or user mapping.
 * Each catalog's options exclude or need only options of that catalog, so
 * checking one catalog's list alone is checking all it can break.
 */
Datum
redislock_fdw_validator(PG_FUNCTION_ARGS)
{
	List	   *options = untransformRelOptions(PG_GETARG_DATUM(0));
	Oid			context = PG_GETARG_OID(1);
	RedisServerOptions opts = default_options;

	check_combinations(&opts, read_options(&opts, options, context));
	PG_RETURN_VOID();
}
