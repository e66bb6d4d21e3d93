/*-------------------------------------------------------------------------
 *
 * ledger.c
 *		What a transaction did to jobs: every change of jobs' states that
 *		claimq makes is reported here once, and takes effect through the
 *		one pair of transaction and subtransaction callbacks when the
 *		transaction ends.
 *
 * A move is n jobs of a queue going from one state to another (CQ_IS_ABSENT
 * before an insert and after a delete), reported by the path that made it
 * (enqueue.c, claim.c, settle.c, cancel.c, reclaim.c, prune.c, and through
 * claimq.ledger_note() the SQL-language ones, workflows' judgements and
 * fired schedules among them).  The path knows
 * both states: each statement that moves jobs returns, per row, enough to
 * tell the state it left (a deleted row's own state; where an update's
 * RETURNING sees only the new row, a rule that holds of claimq's rows: a
 * held job was claimed if its started_at is null and running if not, and
 * a job cancelled while pending loses its token).  From each move the
 * ledger derives what the consumers need, at once:
 *
 *	counters		the call's counter for the jobs, and dead and started
 *					where the move says so (added to shared memory when the
 *					call closes: counters count calls, committed or not)
 *	latencies		one sample, if the move carries one
 *	census			a note of -n for the state left and +n for the one
 *					entered (census.c adds them when the commit is visible)
 *	floors and		the queues of the transaction are listed here: jobs
 *	wake-ups		made pending lower the queue's floor (floor.c) at once
 *					and at commit, and wake its waiting claims at commit
 *					(wakeup.c); jobs finished or deleted wake wait_for;
 *					a claim lists its queue before its statement runs, so
 *					that an abort lowers the floor again
 *	flow control	jobs leaving flight free queue-wide slots (buckets.c);
 *					the groups of the jobs are synced with their queue's
 *					group limits when the call closes (groups.c)
 *
 * The census is fed from here only.  Writes to claimq.job by anything else
 * (plain SQL, a restore) are caught by a statement-level trigger, the
 * census's guard, which makes the census unknown until the reclaimer
 * counts again; it stands aside while one of claimq's own statements runs
 * (cq_own_statements).
 *
 * When the transaction ends, every module is called in this order:
 *
 *	pre-prepare		flow (refuses to prepare a transaction holding flow
 *					reservations: nothing would hold them meanwhile)
 *	pre-commit		census (publishes the xid in the commit slot)
 *	commit, abort,	flow (gives back the slots it reserved, so that the
 *	prepare			claims woken below find them free), census (adds or
 *					drops the notes), the queues listed here (lowers the
 *					floors first, then sets the latches of the waiters: a
 *					woken claim finds the floor lowered and the slots free)
 *	subtransaction	census (a subtransaction's notes become its parent's
 *	commit, abort	or are dropped), the queues listed here (an aborted
 *					subtransaction's claims lower their floors)
 *
 * Every function is called on every event once the ledger is in use, and
 * returns at once when its module recorded nothing.  Nothing here takes a
 * lock; each module's locking is stated in its own header.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "claimq.h"

static Oid	cq_ledger_relid(void);

PG_FUNCTION_INFO_V1(claimq_ledger_begin);
PG_FUNCTION_INFO_V1(claimq_ledger_note);
PG_FUNCTION_INFO_V1(claimq_ledger_end);


/* claimq.ledger_begin() scopes open in this transaction. */
static int	cq_sql_scopes = 0;

/* Whether jobs in the state hold a slot of their queue's flight. */
static inline bool
cq_in_flight(CqState state)
{
	return state == CQ_IS_CLAIMED || state == CQ_IS_RUNNING;
}

/* A move of n jobs from one state to another, with nothing else to tell. */
void
cq_move_init(CqMove *move, int32 queue_id, CqState from, CqState to, int64 n)
{
	move->queue_id = queue_id;
	move->from = from;
	move->to = to;
	move->n = n;
	move->counter = -1;
	move->run_at = DT_NOBEGIN;
	move->latency = -1;
	move->latency_us = 0;
	move->group_key = (Datum) 0;
	move->group_keys = (Datum) 0;
}

/*
 * Report a move (see the file header).  Nothing here fails but for want of
 * memory; what needs SPI waits for cq_ledger_close.
 */
void
cq_ledger_note(CqLedgerCall *call, const CqMove *move)
{
	int32		queue_id = move->queue_id;

	if (move->n <= 0 && move->latency < 0)
		return;
	if (move->counter >= 0)
		cq_count_add(&call->counts, queue_id, (CqCounter) move->counter,
					 move->n);
	if (move->to == CQ_IS_DEAD && move->counter != CQ_DEAD)
		cq_count_add(&call->counts, queue_id, CQ_DEAD, move->n);
	if (move->from == CQ_IS_PENDING && move->to == CQ_IS_RUNNING)
		cq_count_add(&call->counts, queue_id, CQ_STARTED, move->n);
	if (move->latency >= 0)
		cq_latency_add(&call->counts, queue_id, (CqLatencyKind) move->latency,
					   move->latency_us);
	if (move->n <= 0)
		return;

	if (move->from != move->to)
		cq_census_move(cq_ledger_relid(), queue_id, move->from, move->to,
					   move->n);

	if (move->to == CQ_IS_PENDING)
		cq_made_ready(queue_id, move->run_at);
	else if (move->to == CQ_IS_DONE || move->to == CQ_IS_DEAD ||
			 move->to == CQ_IS_CANCELLED || move->to == CQ_IS_ABSENT)
		cq_finished_on_commit();

	if (cq_in_flight(move->from) && !cq_in_flight(move->to) &&
		call->freed_queue != queue_id)
	{
		if (cq_bucket_freed(queue_id))
			cq_freed_on_commit(queue_id);
		call->freed_queue = queue_id;
	}
	if (move->group_key != (Datum) 0)
		cq_groups_note(&call->groups, queue_id, move->group_key);
	if (move->group_keys != (Datum) 0)
	{
		ArrayType  *keys = DatumGetArrayTypeP(move->group_keys);
		Datum	   *elems;
		bool	   *nulls;
		int			nelems;

		deconstruct_array(keys, TEXTOID, -1, false, TYPALIGN_INT,
						  &elems, &nulls, &nelems);
		for (int i = 0; i < nelems; i++)
			if (!nulls[i])
				cq_groups_note(&call->groups, queue_id, elems[i]);
	}
}

/*
 * The end of a call: its counts go to shared memory and the groups noted
 * are synced.  The caller has connected SPI, and the group keys of its
 * moves are still valid.
 */
void
cq_ledger_close(CqLedgerCall *call)
{
	cq_count_flush(&call->counts);
	cq_groups_sync_noted(&call->groups);
	cq_ledger_groups_freed(&call->groups);
	call->freed_queue = 0;
}

/*-------------------------------------------------------------------------
 * The queues of this transaction, for the floors and the wake-ups
 *-------------------------------------------------------------------------
 */

/* Queues listed per transaction before it counts as "many". */
#define CQ_XACT_QUEUES	8

/*
 * This transaction's queues: those it made jobs pending in (ready) and
 * those it claimed jobs from (claimed), each with the earliest run_at.
 * Past CQ_XACT_QUEUES queues it counts as "many": every waiter of the
 * database is woken and every floor of it dropped.
 */
typedef struct CqXactQueue
{
	int32		queue_id;
	bool		ready;
	bool		freed;			/* jobs of a limited queue left flight */
	bool		claimed;
	TimestampTz ready_run_at;
	TimestampTz claimed_run_at;
} CqXactQueue;

static CqXactQueue cq_xact_queues[CQ_XACT_QUEUES];
static int	cq_nqueues = 0;
static bool cq_queues_many = false;
static bool cq_xact_finished = false;	/* finished or removed jobs */

/* The OID of claimq.job in this transaction, once looked up; see below. */
static Oid	cq_xact_relid = InvalidOid;

/*
 * The OID of claimq.job, which tells one installation from the next:
 * looked up once per transaction, for the floors listed here and the
 * census's notes, and kept until the transaction ends (the callbacks at
 * its end may not look anything up).
 */
static Oid
cq_ledger_relid(void)
{
	if (!OidIsValid(cq_xact_relid))
		cq_xact_relid = cq_job_relid();
	return cq_xact_relid;
}

/*
 * Lower the floors of the listed queues: those made ready (at commit) or
 * those claimed from (at abort).
 */
static void
cq_lower_floors(bool ready)
{
	if (cq_queues_many)
	{
		cq_floor_drop_database(MyDatabaseId);
		return;
	}
	for (int q = 0; q < cq_nqueues; q++)
	{
		CqXactQueue *xq = &cq_xact_queues[q];

		if (ready ? xq->ready : xq->claimed)
			cq_floor_lower(MyDatabaseId, cq_xact_relid, xq->queue_id,
						   ready ? xq->ready_run_at : xq->claimed_run_at);
	}
}

/*
 * The end of a transaction, for the queues listed: the floors, then the
 * waiters (a woken claim must find its queue's floor lowered).
 */
static void
cq_queues_xact_event(XactEvent event)
{
	if (cq_nqueues == 0 && !cq_queues_many && !cq_xact_finished)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
			{
				int32		woken[CQ_XACT_QUEUES];
				int			nwoken = 0;

				cq_lower_floors(true);
				for (int q = 0; q < cq_nqueues; q++)
					if (cq_xact_queues[q].ready || cq_xact_queues[q].freed)
						woken[nwoken++] = cq_xact_queues[q].queue_id;
				cq_wake_waiters(woken, nwoken, cq_queues_many,
								cq_xact_finished);
			}
			break;
		case XACT_EVENT_ABORT:
			cq_lower_floors(false);
			break;
		case XACT_EVENT_PREPARE:

			/*
			 * Its fate is decided elsewhere, and COMMIT PREPARED runs no
			 * callback of ours: the floors' age limit covers it, and waiters
			 * see its commit at their next recheck (CQ_WAKE_RECHECK_MS).
			 */
			cq_lower_floors(true);
			cq_lower_floors(false);
			break;
		default:
			return;
	}
	cq_nqueues = 0;
	cq_queues_many = false;
	cq_xact_finished = false;
}

/*
 * The entry of a queue in this transaction's list, or NULL once there are
 * too many to list.
 */
static CqXactQueue *
cq_xact_queue(int32 queue_id)
{
	CqXactQueue *xq;

	(void) cq_ledger_relid();	/* for the floors, at the end */
	for (int q = 0; q < cq_nqueues; q++)
		if (cq_xact_queues[q].queue_id == queue_id)
			return &cq_xact_queues[q];
	if (cq_nqueues == CQ_XACT_QUEUES)
	{
		cq_queues_many = true;
		return NULL;
	}
	xq = &cq_xact_queues[cq_nqueues++];
	xq->queue_id = queue_id;
	xq->ready = xq->freed = xq->claimed = false;
	xq->ready_run_at = xq->claimed_run_at = DT_NOEND;
	return xq;
}

/*
 * A sync of groups (groups.c) freed held jobs: they are ready at commit.
 */
void
cq_ledger_groups_freed(const CqGroups *groups)
{
	for (int i = 0; i < groups->nfreed; i++)
		cq_made_ready(groups->freed_queue_ids[i], groups->freed_run_ats[i]);
}

/*
 * Note that this transaction made jobs of the queue pending, the earliest
 * at run_at (DT_NOBEGIN if unknown): waiters on the queue are woken and
 * its floor lowered when the transaction commits.  The floor is lowered
 * at once as well, for this transaction's own later claims, which see the
 * jobs already.
 */
void
cq_made_ready(int32 queue_id, TimestampTz run_at)
{
	CqXactQueue *xq;

	if (!cq_shmem_ready)
		return;
	xq = cq_xact_queue(queue_id);

	/*
	 * Past CQ_XACT_QUEUES queues the commit drops the database's floors,
	 * once; this queue's is lowered now either way, which is all this
	 * transaction's own claims need (not a pass over every floor per move,
	 * under the lock every claim takes).
	 */
	if (xq != NULL)
	{
		xq->ready = true;
		xq->ready_run_at = Min(xq->ready_run_at, run_at);
	}
	cq_floor_lower(MyDatabaseId, cq_xact_relid, queue_id, run_at);
}

/*
 * Note that this transaction took jobs of a queue with queue-wide limits
 * out of flight: claims waiting on the queue are woken when it commits
 * (buckets.c).
 */
void
cq_freed_on_commit(int32 queue_id)
{
	CqXactQueue *xq;

	if (!cq_shmem_ready)
		return;
	xq = cq_xact_queue(queue_id);
	if (xq != NULL)
		xq->freed = true;
}

/*
 * Note that this transaction finished or removed jobs: every wait_for of
 * the database looks again when it commits.  (A wait_for that finds its
 * jobs unfinished sleeps on; one woken for nothing costs a look.)
 */
void
cq_finished_on_commit(void)
{
	if (!cq_shmem_ready)
		return;
	cq_xact_finished = true;
}

/*
 * ledger_wake(queue_id, made_ready, finished) returns void: jobs that
 * became claimable, or finished, without a move (resume_queue, and a
 * change of alter_queue's group limits, which frees held jobs): at commit,
 * wake the claims waiting on the queue and lower its floor, or wake
 * wait_for.  (The SQL-language moves report through ledger_note.)  In no
 * duty.
 */
PG_FUNCTION_INFO_V1(claimq_ledger_wake);
PG_FUNCTION_INFO_V1(claimq_note_change);

Datum
claimq_ledger_wake(PG_FUNCTION_ARGS)
{
	cq_arg_not_null(fcinfo, 0, "queue_id");
	if (!PG_ARGISNULL(1) && PG_GETARG_BOOL(1))
		cq_made_ready(PG_GETARG_INT32(0), DT_NOBEGIN);
	if (!PG_ARGISNULL(2) && PG_GETARG_BOOL(2))
		cq_finished_on_commit();
	PG_RETURN_VOID();
}

/*
 * note_change(), ledger_wake()'s name before 0.8: the update scripts of
 * earlier versions create it, and an install not yet updated calls it.
 */
Datum
claimq_note_change(PG_FUNCTION_ARGS)
{
	return claimq_ledger_wake(fcinfo);
}

/*
 * Note that this transaction claimed jobs of the queue, the earliest at
 * run_at: if it aborts, they are pending again.
 */
void
cq_claimed_in_xact(int32 queue_id, TimestampTz run_at)
{
	CqXactQueue *xq;

	if (!cq_shmem_ready)
		return;
	xq = cq_xact_queue(queue_id);
	if (xq == NULL)
		return;
	xq->claimed = true;
	xq->claimed_run_at = Min(xq->claimed_run_at, run_at);
}

/*
 * The earliest run_at at which this transaction made jobs of the queue
 * pending (DT_NOEND if none): its own claims start no later than that,
 * whatever floor other sessions' claims have set meanwhile, since those
 * could not see the jobs.
 */
TimestampTz
cq_xact_ready_run_at(int32 queue_id)
{
	if (cq_queues_many)
		return DT_NOBEGIN;
	for (int q = 0; q < cq_nqueues; q++)
		if (cq_xact_queues[q].queue_id == queue_id && cq_xact_queues[q].ready)
			return cq_xact_queues[q].ready_run_at;
	return DT_NOEND;
}

/*
 * The scopes of claimq.ledger_begin() end with the (sub)transaction that
 * failed inside them.  (An aborted subtransaction ends them all: a scope
 * opened by its parent and still open then makes the guard note a write
 * of its own as someone else's, which costs a recount, never a count.)
 */
static void
cq_ledger_reset_scopes(void)
{
	cq_own_statements -= cq_sql_scopes;
	cq_sql_scopes = 0;
}

static void
cq_ledger_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			cq_buckets_xact_event(event);
			break;
		case XACT_EVENT_PRE_COMMIT:
			cq_census_xact_event(event);
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			cq_ledger_reset_scopes();
			cq_buckets_xact_event(event);
			cq_census_xact_event(event);
			cq_queues_xact_event(event);
			cq_fair_xact_event(event);
			cq_xact_relid = InvalidOid;
			cq_route_end();
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
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		cq_ledger_reset_scopes();

		/*
		 * The shard locks a route took in the subtransaction are gone: the
		 * next call resolves its route again (shard.c).
		 */
		cq_route_end();
	}
	cq_census_subxact_event(event);
	cq_fair_subxact_event(event);
	if (event == SUBXACT_EVENT_ABORT_SUB)
		cq_lower_floors(false);
}

/*
 * The ledger's callbacks run at the end of every transaction of the
 * backend: registered once, when the library is loaded (_PG_init).  At the
 * end of a transaction that recorded nothing they return at once.
 */
void
cq_ledger_init(void)
{
	RegisterXactCallback(cq_ledger_xact_callback, NULL);
	RegisterSubXactCallback(cq_ledger_subxact_callback, NULL);
}

/*
 * ledger_begin() returns void: the SQL-language functions that move jobs
 * (drop_queue, purge_queue, retry_dead) open a scope before their
 * statements, in which the census's guard stands aside, and report what
 * the statements did with ledger_note(), then ledger_end().  In no duty.
 */
Datum
claimq_ledger_begin(PG_FUNCTION_ARGS)
{
	cq_own_statements++;
	cq_sql_scopes++;
	PG_RETURN_VOID();
}

/*
 * ledger_note(queue_id, to_state, from_states, counts) returns void: in the
 * scope of ledger_begin(), counts[i] jobs of the queue moved from
 * from_states[i] (NULL: inserted) to to_state (NULL: deleted).  In no duty.
 */
Datum
claimq_ledger_note(PG_FUNCTION_ARGS)
{
	CqLedgerCall call = {0};
	int32		queue_id;
	CqState		to;
	Datum	   *froms;
	bool	   *fromnulls;
	Datum	   *counts;
	bool	   *countnulls;
	int			nfroms;
	int			ncounts;

	cq_arg_not_null(fcinfo, 0, "queue_id");
	cq_arg_not_null(fcinfo, 2, "from_states");
	cq_arg_not_null(fcinfo, 3, "counts");
	if (cq_sql_scopes == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ledger_note() without ledger_begin()")));
	queue_id = PG_GETARG_INT32(0);
	to = PG_ARGISNULL(1) ? CQ_IS_ABSENT : cq_state_of(PG_GETARG_DATUM(1));
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(2), TEXTOID, -1, false,
					  TYPALIGN_INT, &froms, &fromnulls, &nfroms);
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(3), INT8OID, sizeof(int64),
					  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &counts, &countnulls,
					  &ncounts);
	if (nfroms != ncounts)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("from_states and counts must have as many elements")));
	for (int i = 0; i < nfroms; i++)
	{
		CqMove		move;

		if (countnulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("counts must not hold nulls")));
		cq_move_init(&move, queue_id,
					 fromnulls[i] ? CQ_IS_ABSENT : cq_state_of(froms[i]), to,
					 DatumGetInt64(counts[i]));
		/* Jobs cancelled by the SQL paths: workflows' judgements. */
		if (to == CQ_IS_CANCELLED)
			move.counter = CQ_CANCELLED;
		cq_ledger_note(&call, &move);
	}
	cq_ledger_close(&call);
	PG_RETURN_VOID();
}

/*
 * ledger_end() returns void: the scope of the last ledger_begin() ends.
 * In no duty.  (Before 0.8 it took a move, as ledger_note does, and ended
 * the scope: with four arguments, from an install not yet updated to 0.8,
 * it still does.)
 */
Datum
claimq_ledger_end(PG_FUNCTION_ARGS)
{
	if (PG_NARGS() == 4)
		(void) claimq_ledger_note(fcinfo);
	if (cq_sql_scopes == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ledger_end() without ledger_begin()")));
	cq_sql_scopes--;
	cq_own_statements--;
	PG_RETURN_VOID();
}
