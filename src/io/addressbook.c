/*-------------------------------------------------------------------------
 *
 * addressbook.c
 *		The addresses of a node's host: looked up by SQL calls, which
 *		publish them, and taken from a shared address book by the processes
 *		that must not look names up.
 *
 * Looking up a host name is the one step of connecting whose wait the
 * extension cannot bound: getaddrinfo() waits for as long as the
 * resolver's own timeouts say, and neither a deadline nor an interrupt
 * shortens it.  So only SQL calls look names up.  A transaction end must
 * end within its bound, and redislock's workers renew the leases and wake
 * the waiters of every backend of their database: a resolver that does not
 * answer must stall none of them.  They connect to the addresses that SQL
 * calls published instead, when the library is preloaded.  A backend that
 * holds a lock, or waits for one, has looked up the names of its server's
 * nodes and connected to them, so the addresses that the renewal of its
 * lease and its wake-up need are in the book.  A name that no session has
 * looked up since the server started is not: a worker's stock recovery on
 * that server waits for the first SQL call that uses it.
 *
 * Each lookup publishes what it found, replacing what the book had for the
 * name: a name that moved is followed from the next lookup of any backend,
 * as a SQL call that cannot connect looks its name up again, and a process
 * that cannot connect takes the book's addresses again at its next connect.
 * The book has a fixed number of entries, one per host name and port
 * (numeric addresses need none); a name new to a full book takes the entry
 * of the one least recently published or read.  Entries are copied in and
 * out under the book's lock, which is never held across I/O.
 *
 * Without the preload there is no book: each backend has the addresses it
 * looked up itself.  After a crash, shared memory is made anew and the book
 * starts empty; the backends that held locks are gone with it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <netdb.h>

#include "access/xact.h"
#include "common/ip.h"
#include "postmaster/bgworker.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "io/io.h"

/* Host names (and ports) whose addresses the book keeps */
#define ADDRESS_BOOK_NAMES	64

/* A host name's length that the book keeps: DNS names have 253 at most */
#define ADDRESS_BOOK_HOSTLEN 256

typedef struct BookEntry
{
	char		host[ADDRESS_BOOK_HOSTLEN]; /* "" for a free entry */
	int			port;
	uint64		last_used;		/* the book's clock when last published or
								 * read */
	int			naddrs;
	SockAddr	addrs[REDIS_HOST_MAX_ADDRS];
} BookEntry;

typedef struct AddressBook
{
	LWLock	   *lock;			/* for every field and entry */
	uint64		clock;			/* ticks at each publication or read */
	BookEntry	entries[ADDRESS_BOOK_NAMES];
} AddressBook;

static AddressBook *book = NULL;

static Size
addressbook_shmem_size(void)
{
	return sizeof(AddressBook);
}

void
addressbook_shmem_request(void)
{
	RequestAddinShmemSpace(addressbook_shmem_size());
	RequestNamedLWLockTranche("redislock addresses", 1);
}

/* Attach to the book, made empty at the first start and after a crash */
void
addressbook_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	book = ShmemInitStruct("redislock addresses", addressbook_shmem_size(),
						   &found);
	if (!found)
	{
		memset(book, 0, addressbook_shmem_size());
		book->lock = &(GetNamedLWLockTranche("redislock addresses"))->lock;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* The entry of host and port, or NULL; the caller holds the lock */
static BookEntry *
entry_of(const char *host, int port)
{
	int			i;

	for (i = 0; i < ADDRESS_BOOK_NAMES; i++)
	{
		BookEntry  *entry = &book->entries[i];

		if (entry->port == port && strcmp(entry->host, host) == 0)
			return entry;
	}
	return NULL;
}

/*
 * The entry that a new name takes: a free one, or else the one least
 * recently used.  The caller holds the lock.
 */
static BookEntry *
entry_to_take(void)
{
	BookEntry  *oldest = &book->entries[0];
	int			i;

	for (i = 0; i < ADDRESS_BOOK_NAMES; i++)
	{
		BookEntry  *entry = &book->entries[i];

		if (entry->host[0] == '\0')
			return entry;
		if (entry->last_used < oldest->last_used)
			oldest = entry;
	}
	return oldest;
}

/*
 * Publish the addresses that a lookup found for host and port, in place of
 * those the book had.  A name too long for an entry is not published.
 */
static void
publish(const char *host, int port, const SockAddr *addrs,
					int naddrs)
{
	BookEntry  *entry;

	Assert(naddrs > 0 && naddrs <= REDIS_HOST_MAX_ADDRS);
	if (book == NULL || strlen(host) >= ADDRESS_BOOK_HOSTLEN)
		return;
	LWLockAcquire(book->lock, LW_EXCLUSIVE);
	entry = entry_of(host, port);
	if (entry == NULL)
	{
		entry = entry_to_take();
		strlcpy(entry->host, host, ADDRESS_BOOK_HOSTLEN);
		entry->port = port;
	}
	entry->last_used = ++book->clock;
	entry->naddrs = naddrs;
	memcpy(entry->addrs, addrs, sizeof(SockAddr) * naddrs);
	LWLockRelease(book->lock);
}

/*
 * Copy into addrs (room for REDIS_HOST_MAX_ADDRS) the addresses published
 * for host and port; returns how many, 0 when none were.
 */
static int
look_up_in_book(const char *host, int port, SockAddr *addrs)
{
	BookEntry  *entry;
	int			naddrs = 0;

	if (book == NULL)
		return 0;
	LWLockAcquire(book->lock, LW_EXCLUSIVE);
	entry = entry_of(host, port);
	if (entry != NULL)
	{
		entry->last_used = ++book->clock;
		naddrs = entry->naddrs;
		memcpy(addrs, entry->addrs, sizeof(SockAddr) * naddrs);
	}
	LWLockRelease(book->lock);
	return naddrs;
}

/* The node's room for its addresses, made at first use */
static SockAddr *
address_room(RedisNode *node)
{
	if (node->addrs == NULL)
		node->addrs = MemoryContextAlloc(node->conn->cxt,
										 sizeof(SockAddr) * REDIS_HOST_MAX_ADDRS);
	return node->addrs;
}

/* Keep on the node the first addresses of a lookup's answer */
static void
keep_addresses(RedisNode *node, const struct addrinfo *found)
{
	SockAddr   *room = address_room(node);
	const struct addrinfo *addr;

	node->naddrs = 0;
	for (addr = found; addr != NULL && node->naddrs < REDIS_HOST_MAX_ADDRS;
		 addr = addr->ai_next)
	{
		SockAddr   *kept = &room[node->naddrs++];

		memcpy(&kept->addr, addr->ai_addr, addr->ai_addrlen);
		kept->salen = addr->ai_addrlen;
	}
}

/*
 * Take the addresses that a SQL call, of this backend or another, found
 * for the node's host.  False, with *reason, when none were published.
 */
static bool
addresses_from_book(RedisNode *node, const char **reason)
{
	node->naddrs = look_up_in_book(node->host, node->port, address_room(node));
	if (node->naddrs > 0)
		return true;
	*reason = "no address of it is known here, and host names are looked up only by SQL calls";
	return false;
}

/*
 * May this process look up a host name now?  Only a SQL call may, in a
 * transaction in progress: a transaction end, a subtransaction end and
 * backend exit must end within their bounds.  Of redislock's own workers,
 * only the one that recovers stock does, in its transactions: the others
 * renew leases and wake waiters, which a resolver that does not answer
 * would stall for their whole database.
 */
bool
node_may_look_up(void)
{
	if (MyBgworkerEntry != NULL &&
		strcmp(MyBgworkerEntry->bgw_library_name, "redislock") == 0 &&
		strcmp(MyBgworkerEntry->bgw_function_name, "redislock_recovery_main") != 0)
		return false;
	return IsTransactionState();
}

/*
 * Find the addresses of the node's host and keep them on the node.  A
 * numeric address is parsed, without any lookup.  A host name is looked up
 * only when look_up allows (see node_may_look_up()), and what is found is
 * published in the book; otherwise the name's addresses come from the
 * book.  False, with *reason, when no address was found.
 */
bool
node_find_addresses(RedisNode *node, bool look_up, const char **reason)
{
	struct addrinfo hints = {0};
	struct addrinfo *found;
	char		port[12];
	bool		looked_up = false;
	int			rc;

	Assert(node->naddrs == 0);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
	snprintf(port, sizeof(port), "%d", node->port);
	rc = pg_getaddrinfo_all(node->host, port, &hints, &found);
	if (rc == EAI_NONAME && !look_up)
		return addresses_from_book(node, reason);
	if (rc == EAI_NONAME)
	{
		hints.ai_flags = AI_NUMERICSERV;
		rc = pg_getaddrinfo_all(node->host, port, &hints, &found);
		looked_up = true;
	}
	if (rc != 0)
	{
		*reason = gai_strerror(rc);
		return false;
	}
	keep_addresses(node, found);
	pg_freeaddrinfo_all(AF_UNSPEC, found);
	if (looked_up)
		publish(node->host, node->port, node->addrs, node->naddrs);
	return true;
}
