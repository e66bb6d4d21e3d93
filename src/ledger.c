/*-------------------------------------------------------------------------
 *
 * ledger.c
 *		The one pair of transaction and subtransaction callbacks through
 *		which whatever a transaction did to jobs takes effect when it
 *		ends: the flow slots it reserved, the census's notes, the claim
 *		floors and the wake-ups.
 *
 * Each module keeps its own record of the transaction (flow.c its
 * reservations, census.c its notes and commit slot, wakeup.c its queues)
 * and has one function per kind of event; a module registers nothing
 * itself, but calls cq_ledger_use() before it first records something, and
 * the ledger calls every module, in this order:
 *
 *	pre-prepare		flow (refuses to prepare a transaction holding flow
 *					reservations: nothing would hold them meanwhile)
 *	pre-commit		census (publishes the xid in the commit slot)
 *	commit, abort,	flow (gives back the slots it reserved, so that the
 *	prepare			claims woken below find them free), census (adds or
 *					drops the notes), wake-ups (lowers the floors first,
 *					then sets the latches of the waiters: a woken claim
 *					finds the floor lowered and the slots free)
 *	subtransaction	census (a subtransaction's notes become its parent's
 *	commit, abort	or are dropped), wake-ups (an aborted subtransaction's
 *					claims lower their floors)
 *
 * Every function is called on every event once the ledger is in use, and
 * returns at once when its module recorded nothing.  Nothing here takes a
 * lock; each module's locking is stated in its own header.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"

#include "claimq.h"

static bool cq_ledger_registered = false;

static void
cq_ledger_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			cq_flow_xact_event(event);
			break;
		case XACT_EVENT_PRE_COMMIT:
			cq_census_xact_event(event);
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			cq_flow_xact_event(event);
			cq_census_xact_event(event);
			cq_wakeup_xact_event(event);
			break;
		default:
			break;
	}
}

static void
cq_ledger_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						   SubTransactionId parentSubid, void *arg)
{
	if (event != SUBXACT_EVENT_COMMIT_SUB && event != SUBXACT_EVENT_ABORT_SUB)
		return;
	cq_census_subxact_event(event);
	cq_wakeup_subxact_event(event);
}

/*
 * Make sure the ledger's callbacks run at the end of this and every later
 * transaction of the backend; called by a module before it first records
 * something of a transaction.
 */
void
cq_ledger_use(void)
{
	if (cq_ledger_registered)
		return;
	RegisterXactCallback(cq_ledger_xact_callback, NULL);
	RegisterSubXactCallback(cq_ledger_subxact_callback, NULL);
	cq_ledger_registered = true;
}
