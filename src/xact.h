/*-------------------------------------------------------------------------
 *
 * xact.h
 *		The transaction story: what redislock does at each transaction end
 *		(xact.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDISLOCK_XACT_H
#define REDISLOCK_XACT_H


extern void redislock_init_xact(void);

#endif							/* REDISLOCK_XACT_H */
