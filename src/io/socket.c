/*-------------------------------------------------------------------------
 *
 * socket.c
 *		Opening the socket of a node within a deadline, and what every wait
 *		of a node does with the latch.
 *
 * A connect attempt holds a socket and a wait set over it, which becomes
 * the node's own once connected; whatever ends the attempt gives both
 * back (connect_address()).
 *
 * Looking up a host name is the one step whose wait the extension does not
 * bound: getaddrinfo() waits for the resolver as long as the resolver's own
 * timeouts say.  Only SQL calls look names up; the addresses found are
 * kept, and published for the processes that do not look names up
 * (node_open_socket(), addressbook.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "miscadmin.h"
#include "storage/fd.h"

#include "io/io.h"

/* The milliseconds left until deadline, rounded up; 0 once it passed */
long
node_ms_until(TimestampTz deadline)
{
	TimestampTz now = GetCurrentTimestamp();

	if (now >= deadline)
		return 0;
	return (long) ((deadline - now + 999) / 1000);
}

/*
 * Serve what woke the latch.  SQL functions let PostgreSQL act on cancel,
 * timeouts and termination right away; they throw from here.  Where
 * interrupts are held (transaction end), a pending termination ends the
 * wait instead: returns false then.
 */
bool
node_serve_interrupts(int elevel)
{
	ResetLatch(MyLatch);
	if (elevel >= ERROR && INTERRUPTS_CAN_BE_PROCESSED())
		CHECK_FOR_INTERRUPTS();
	return !ProcDiePending;
}

/*
 * A wait set with room for nsockets sockets, watching the latch and, under
 * a postmaster, its death; a kept one lives across transactions until it
 * is freed (compat_wait_set()).  A single-user backend has no postmaster to
 * watch: AddWaitEventToSet() would fail there, where WaitLatch() just
 * leaves the event out.
 */
WaitEventSet *
node_wait_set_create(bool kept, int nsockets)
{
	WaitEventSet *set = compat_wait_set(kept, nsockets + 2);

	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	if (IsUnderPostmaster)
		AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL,
						  NULL);
	return set;
}

/*
 * Wait on set, a connect attempt's, for its connect in progress.  False
 * when the deadline passed or the wait was given up for a termination
 * request.
 */
static bool
wait_connected(WaitEventSet *set, TimestampTz deadline, int elevel)
{
	for (;;)
	{
		long		timeout = node_ms_until(deadline);
		WaitEvent	event;

		if (timeout <= 0)
			return false;
		if (WaitEventSetWait(set, timeout, &event, 1,
							 redislock_wait_event()) == 0)
			continue;
		if (event.events & WL_SOCKET_CONNECTED)
			return true;
		if ((event.events & WL_LATCH_SET) && !node_serve_interrupts(elevel))
			return false;
	}
}

/* Open a socket to addr and start connecting; PGINVALID_SOCKET on failure */
static pgsocket
start_connect(const struct sockaddr *addr, socklen_t addrlen, int *err)
{
	pgsocket	sock = socket(addr->sa_family, SOCK_STREAM, 0);

	if (sock == PGINVALID_SOCKET)
	{
		*err = errno;
		return PGINVALID_SOCKET;
	}
	if (addr->sa_family != AF_UNIX)
	{
		int			on = 1;

		(void) setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	}
	if (!pg_set_noblock(sock) ||
		(connect(sock, addr, addrlen) < 0 &&
		 errno != EINPROGRESS && errno != EAGAIN && errno != EINTR))
	{
		*err = errno;
		closesocket(sock);
		return PGINVALID_SOCKET;
	}
	return sock;
}

/*
 * Make a connected socket's reads block, for at most RECEIVE_SLICE_MS (see
 * node.c's header comment); writes and the other reads pass MSG_DONTWAIT.
 */
static bool
set_receive_slices(pgsocket sock, int *err)
{
	struct timeval slice = {0, RECEIVE_SLICE_MS * 1000};

	if (!pg_set_block(sock) ||
		setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof(slice)) < 0)
	{
		*err = errno;
		return false;
	}
	return true;
}

/* Has the connect started on sock succeeded?  Else *err says why not. */
static bool
connect_succeeded(pgsocket sock, int *err)
{
	socklen_t	len = sizeof(*err);

	if (getsockopt(sock, SOL_SOCKET, SO_ERROR, err, &len) < 0)
		*err = errno;
	return *err == 0;
}

/*
 * Reserve a descriptor for a connect attempt's socket, and make sure that
 * its wait set will get one too: CreateWaitEventSet() raises an ERROR when
 * fd.c refuses, and a transaction end, which must not raise, reports a
 * connect failure as a WARNING instead.  The wait set reserves its own.
 */
static bool
reserve_descriptors(void)
{
	if (!AcquireExternalFD())
		return false;
	if (!AcquireExternalFD())
	{
		ReleaseExternalFD();
		return false;
	}
	ReleaseExternalFD();
	return true;
}

/*
 * Give back what a connect attempt holds: its wait set, if made, its
 * socket, if open, and the descriptor reserved for the socket.
 */
static void
end_attempt(WaitEventSet *set, pgsocket sock)
{
	if (set != NULL)
		FreeWaitEventSet(set);
	if (sock != PGINVALID_SOCKET)
		closesocket(sock);
	ReleaseExternalFD();
}

/*
 * Connect the node to one address within the deadline: a socket, and a
 * wait set over it (latch, postmaster death, socket) that becomes the
 * node's once connected, so that a connected node holds two descriptors
 * and connecting needs no more.  Whatever ends the attempt gives both
 * back, an ERROR thrown by interrupt service while waiting (cancel,
 * statement_timeout) included: neither is a resource that an abort
 * releases, and a backend whose connects are cancelled again and again
 * would run out of descriptors.  On failure, *err is the errno, or 0 when
 * the deadline passed, the wait was given up, or *reason says why.
 */
static bool
connect_address(RedisNode *node, const struct sockaddr *addr,
				socklen_t addrlen, TimestampTz deadline, int elevel,
				int *err, const char **reason)
{
	WaitEventSet *volatile set = NULL;
	volatile pgsocket sock = PGINVALID_SOCKET;
	bool		connected = false;
	int			pos = 0;

	*err = 0;
	if (!reserve_descriptors())
	{
		*reason = "too many open files on the local server (see max_files_per_process)";
		return false;
	}

	PG_TRY();
	{
		set = node_wait_set_create(true, 1);
		sock = start_connect(addr, addrlen, err);
		if (sock != PGINVALID_SOCKET)
		{
			pos = AddWaitEventToSet(set, WL_SOCKET_CONNECTED, sock, NULL,
									NULL);
			connected = wait_connected(set, deadline, elevel) &&
				connect_succeeded(sock, err);
		}
	}
	PG_CATCH();
	{
		end_attempt(set, sock);
		PG_RE_THROW();
	}
	PG_END_TRY();

	if (!connected || !set_receive_slices(sock, err))
	{
		end_attempt(set, sock);
		return false;
	}
	node->sock = sock;
	node->waitset = set;
	node->waitset_socket_pos = pos;
	node->waitset_events = WL_SOCKET_READABLE;
	ModifyWaitEvent(set, pos, node->waitset_events, NULL);
	return true;
}

/* Try the node's addresses in turn, as connect_address() does one */
static bool
connect_addresses(RedisNode *node, TimestampTz deadline, int elevel,
				  int *err, const char **reason)
{
	int			i;

	for (i = 0; i < node->naddrs; i++)
	{
		if (connect_address(node, (struct sockaddr *) &node->addrs[i].addr,
							node->addrs[i].salen, deadline, elevel, err,
							reason))
			return true;
		if (*err == 0)
			break;
	}
	return false;
}

/*
 * Connect the node within the deadline.  A TCP node connects to the
 * addresses found for its host the last time, found afresh when there are
 * none: looked up by a SQL call, and taken from the address book by the
 * rest (see node_may_look_up()), which connect to known addresses or fail at
 * once.  A connect that failed forgets the addresses, so that a name moved
 * elsewhere is followed: a SQL call looks the name up again at once when
 * kept addresses refused the connect, else at the next connect; the rest
 * take the book's again at their next connect.  On failure, *err and
 * *reason are as connect_address() sets them.
 */
bool
node_open_socket(RedisNode *node, TimestampTz deadline, int elevel, int *err,
			const char **reason)
{
	bool		look_up = node_may_look_up();
	bool		fresh = false;

	*err = 0;
	*reason = NULL;
	if (node->unix_socket != NULL)
	{
		struct sockaddr_un unaddr = {0};

		unaddr.sun_family = AF_UNIX;
		strlcpy(unaddr.sun_path, node->unix_socket, sizeof(unaddr.sun_path));
		return connect_address(node, (struct sockaddr *) &unaddr,
							   sizeof(unaddr), deadline, elevel, err, reason);
	}

	if (node->naddrs == 0)
	{
		if (!node_find_addresses(node, look_up, reason))
			return false;
		fresh = true;
	}
	if (connect_addresses(node, deadline, elevel, err, reason))
		return true;
	node->naddrs = 0;
	if (!look_up || fresh || *err == 0 ||
		!node_find_addresses(node, true, reason))
		return false;
	if (connect_addresses(node, deadline, elevel, err, reason))
		return true;
	node->naddrs = 0;
	return false;
}
