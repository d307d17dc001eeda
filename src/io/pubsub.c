/*-------------------------------------------------------------------------
 *
 * pubsub.c
 *		Reading what comes on a subscription connection: subscriptions
 *		confirmed and ended, messages, keyspace events, and whether a
 *		server publishes those.
 *
 * Backends waiting for a lock (lock/wake.c) and the worker that listens on
 * their behalf (worker/waker.c) each keep subscription connections of
 * their own; both read them with these.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "io/io.h"

/* Does a CONFIG GET notify-keyspace-events answer hold K, g and x? */
bool
pubsub_keyspace_events_on(const redisReply *reply)
{
	const char *flags;

	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
		reply->element[1]->type != REDIS_REPLY_STRING)
		return false;
	flags = reply->element[1]->str;
	return strchr(flags, 'K') != NULL &&
		(strchr(flags, 'A') != NULL ||
		 (strchr(flags, 'g') != NULL && strchr(flags, 'x') != NULL));
}

/* Is a string reply element equal to str (len bytes)? */
bool
pubsub_element_is(const redisReply *reply, int i, const char *str, int len)
{
	return reply->elements > i &&
		reply->element[i]->type == REDIS_REPLY_STRING &&
		reply->element[i]->len == len &&
		memcmp(reply->element[i]->str, str, len) == 0;
}

/*
 * What a reply on a subscription connection is, so that every subscriber
 * reads its connections alike
 */
PubsubReplyKind
pubsub_reply_kind(const redisReply *reply)
{
	if (reply->type == REDIS_REPLY_ERROR)
		return PUBSUB_REPLY_ERROR;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
		reply->element[0]->type != REDIS_REPLY_STRING)
		return PUBSUB_REPLY_OTHER;
	if (pubsub_element_is(reply, 0, "notify-keyspace-events", 22))
		return PUBSUB_REPLY_KEYSPACE_CONFIG;
	if (reply->elements == 3 &&
		reply->element[2]->type == REDIS_REPLY_STRING &&
		(pubsub_element_is(reply, 0, "message", 7) ||
		 pubsub_element_is(reply, 0, "smessage", 8)))
		return PUBSUB_REPLY_MESSAGE;
	if (pubsub_element_is(reply, 0, "subscribe", 9) ||
		pubsub_element_is(reply, 0, "ssubscribe", 10))
		return PUBSUB_REPLY_SUBSCRIBED;
	if (pubsub_element_is(reply, 0, "unsubscribe", 11) ||
		pubsub_element_is(reply, 0, "sunsubscribe", 12))
		return PUBSUB_REPLY_UNSUBSCRIBED;
	return PUBSUB_REPLY_OTHER;
}

/*
 * What a keyspace event says of a lock's key: an expiry or an eviction
 * frees it, and so does a semaphore's permit given back or expired (ZREM,
 * ZREMRANGEBYSCORE); a DEL frees it too (but our releases also announce
 * theirs); a lease renewal or a SET keeps it held
 */
KeyspaceEvent
pubsub_keyspace_event(const char *event)
{
	if (strcmp(event, "expired") == 0 || strcmp(event, "evicted") == 0 ||
		strcmp(event, "zrem") == 0 || strcmp(event, "zremrangebyscore") == 0)
		return KEYSPACE_FREES;
	if (strcmp(event, "del") == 0)
		return KEYSPACE_DEL;
	return KEYSPACE_KEEPS;
}
