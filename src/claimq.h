/*-------------------------------------------------------------------------
 *
 * claimq.h
 *		Declarations shared by the files of the claimq extension.
 *
 * The tree is split by state transition (in the order of the layout table
 * in CONTRIBUTING.md):
 *		enqueue.c	(new) -> pending | waiting
 *		claim.c		pending -> claimed | running
 *		groups.c	group limits: held pending -> pending
 *		limits.c	the queue-wide limits a claim obeys
 *		buckets.c	the queue-wide limits' shared memory: a slot per
 *					limited queue with its reservations and rate bucket
 *		settle.c	claimed | running -> running, done, pending, dead
 *					(start, extend, complete, fail, release, snooze)
 *		cancel.c	waiting | pending | claimed | running -> cancelled
 *		workflow.c	waiting -> pending | cancelled, when the jobs a job
 *					runs after finish (the C paths' calls into section 8
 *					of sql/claimq.sql, which makes the transition)
 *		status.c	reading jobs' states: status, wait_for
 *		schedule.c	schedules: the reclaimer's call of fire_schedules (the
 *					transition is sql/schedules.sql's, in both editions)
 *		reclaim.c	expired claimed -> pending; expired running -> pending |
 *					dead
 *		prune.c		done | dead | cancelled past retention -> deleted
 *		keys.c		dedup key claims: claim, release, sweep
 *		reclaimer.c	the background worker whose passes run six steps on
 *					a timer: reclaim.c, schedule.c, prune.c, the key
 *					sweep, flow control's upkeep and census.c's recount
 *		wakeup.c	the wait slots of waiting claims and wait_for, and their
 *					wake-ups
 *		ledger.c	what a transaction did to jobs, reported once per move:
 *					counters, census, floors, wake-ups, flow; the one pair
 *					of transaction callbacks
 *		floor.c		claim floors in shared memory
 *		fair.c		fair queues' shares in shared memory: their tenants'
 *					virtual times, picked and charged by claim.c
 *		token.c		fencing tokens, never handed out twice
 *		counters.c	shared per-queue counters and latency histograms
 *		census.c	jobs per queue and state, counted as they commit
 *		common.c	argument checks, SPI helpers, the queue look-up (a leaf
 *					but for shard.c)
 *		shard.c		a distributed install (Citus): a call that names a
 *					queue runs against that queue's shard tables
 *		claimq.c	the root: _PG_init, settings, shared memory (nothing
 *					calls into it)
 *
 * Whether this backend has claimq's shared memory (the preload) is asked
 * one way everywhere: cq_shmem_ready.
 *
 * Shared memory's rules, kept by every file that has a table in it
 * (census.c, buckets.c, counters.c, floor.c, fair.c, wakeup.c,
 * reclaimer.c): no lock is held across a commit, a statement or anything
 * else that can wait on another session (NOTIFY's commit lock, a
 * synchronous standby, a row lock); every table is sized by a setting,
 * and a full table makes the work slower, never wrong, and never makes it
 * wait for another session.
 *
 * Every SQL statement lives next to the transition it performs and runs
 * through SPI with a kept plan; rows are claimed and fenced in the same
 * statement, never read first and written later from C.  The passes
 * that are not statements, a plain or fair queue's claim (claim.c), lock
 * each row before they read it for the update, as a statement's FOR
 * UPDATE does.
 *
 *-------------------------------------------------------------------------
 */
#ifndef CLAIMQ_H
#define CLAIMQ_H

#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_proc.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "storage/lwlock.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/timestamp.h"

/*
 * Built and tested on PostgreSQL 15 (Debian's packages) and 18; 16 and 17
 * are not built or tested here, and are refused.  What differs between
 * the two is decided here, once, by small macros.
 */
#if !((PG_VERSION_NUM >= 150000 && PG_VERSION_NUM < 160000) || \
	  (PG_VERSION_NUM >= 180000 && PG_VERSION_NUM < 190000))
#error "claimq is built and tested on PostgreSQL 15 and 18 only"
#endif

/* This backend's index among the regular backends' PGPROCs, from 0. */
#if PG_VERSION_NUM >= 180000
#include "storage/procnumber.h"
#define CQ_MY_BACKEND_INDEX		((int) MyProcNumber)
#else
#include "storage/backendid.h"
#define CQ_MY_BACKEND_INDEX		((int) MyBackendId - 1)
#endif

/* Whether a role may execute a function. */
#if PG_VERSION_NUM >= 160000
#define CQ_PROC_ACLCHECK(proc, role) \
	object_aclcheck(ProcedureRelationId, (proc), (role), ACL_EXECUTE)
#else
#define CQ_PROC_ACLCHECK(proc, role) \
	pg_proc_aclcheck((proc), (role), ACL_EXECUTE)
#endif

/* The extension version (claimq.control) whose schema this library uses. */
#define CQ_SCHEMA_VERSION	"0.8"

/* Limits from the API contract. */
#define CQ_MAX_BATCH		10000	/* max_jobs per claim, elements per call */
#define CQ_MAX_HEADERS		8192	/* bytes of a job's headers as text */
#define CQ_MAINTAIN_BATCH	10000	/* per step of maintain() */
#define CQ_MAX_LIMIT		1000000 /* group_limit, max_in_flight, rate_limit */
#define CQ_QUEUE_NAME_MAX	63

/* At most this many databases are served by the reclaimer. */
#define CQ_MAX_DATABASES	64

/* Settings (claimq.c) */
#define CQ_MAX_NODE_ID		32767	/* node numbers fill bits 48 to 62 */
extern int	cq_node_id;
extern char *cq_databases;
extern int	cq_reclaim_interval;
extern int	cq_reclaim_batch;
extern bool cq_claim_floors;
extern bool cq_reclaimer_enabled;

/* The sizes of the shared-memory tables (claimq.c; see docs/operations.md) */
extern int	cq_census_entries;
extern int	cq_flow_slots;
extern int	cq_counter_entries;
extern int	cq_floor_slots;
extern int	cq_fair_tenants;
extern bool cq_shmem_ready;

/* A job's states, in the order of claimq.census()'s columns. */
typedef enum CqState
{
	CQ_IS_ABSENT = -1,			/* not in claimq.job: before an insert, after
								 * a delete */
	CQ_IS_PENDING,
	CQ_IS_CLAIMED,
	CQ_IS_RUNNING,
	CQ_IS_DONE,
	CQ_IS_DEAD,
	CQ_IS_CANCELLED,
	CQ_IS_WAITING,
	CQ_NSTATES
} CqState;

/*
 * The live states, as an SQL array: a job in one of them holds its dedup
 * key (the order of job_dedup_idx's predicate).  Those of them that count
 * in its group: a job in one of them holds, unless it is held, a place
 * under its group's limit (a waiting job takes its place when it becomes
 * pending).
 */
#define CQ_LIVE_STATES	"'{waiting,pending,claimed,running}'::text[]"
#define CQ_GROUP_STATES	"'{pending,claimed,running}'::text[]"

/*
 * The state a held job j was in, read off the row an update left: claimq
 * keeps started_at null while a job is claimed and sets it when the job
 * runs (claim.c, start), and neither fail, snooze, complete, cancel nor
 * reclaim changes it.  The ledger needs the state a job left, and an
 * update's RETURNING sees only the new row.
 */
#define CQ_HELD_STATE_SQL \
	"CASE WHEN j.started_at IS NULL THEN 'claimed' ELSE 'running' END"

/* Shared counters (counters.c), one set per database and queue. */
typedef enum CqCounter
{
	CQ_CLAIMED,
	CQ_STARTED,
	CQ_COMPLETED,
	CQ_FAILED,
	CQ_RELEASED,
	CQ_RECLAIMED,
	CQ_DEAD,
	CQ_STALE,
	CQ_CANCELLED,
	CQ_SNOOZED,
	CQ_NCOUNTERS
} CqCounter;

/*
 * Latency histograms (counters.c), one pair per counter entry: wait (from
 * the moment a job became ready to its claim) and run (from start to
 * complete or fail).  Bucket 0 holds durations under 1 microsecond, bucket
 * b >= 1 those in [CQ_LATENCY_RATIO^(b-1), CQ_LATENCY_RATIO^b)
 * microseconds; a percentile is reported as its bucket's geometric
 * middle, within sqrt(CQ_LATENCY_RATIO) - 1 (9.6%) of the exact value.
 */
#define CQ_LATENCY_BUCKETS	160
#define CQ_LATENCY_RATIO	1.2
typedef enum CqLatencyKind
{
	CQ_LATENCY_WAIT,
	CQ_LATENCY_RUN,
	CQ_NLATENCIES
} CqLatencyKind;

/* Counts gathered during one call, added to shared memory at its end. */
#define CQ_COUNT_BATCH_SLOTS 16
#define CQ_LATENCY_BATCH_SLOTS 32
typedef struct CqCountBatch
{
	int			nslots;
	struct
	{
		int32		queue_id;
		uint64		counts[CQ_NCOUNTERS];
	}			slots[CQ_COUNT_BATCH_SLOTS];
	int			nlatencies;
	struct
	{
		int32		queue_id;
		int16		kind;
		int16		bucket;
		uint64		n;
		uint64		sum_us;
	}			latencies[CQ_LATENCY_BATCH_SLOTS];
	const char *queue_name;		/* the name of queue_id, if known */
	int32		named_queue_id;
} CqCountBatch;

extern Size cq_counters_shmem_size(void);
extern void cq_counters_shmem_init(LWLock *lock);
extern void cq_count(int32 queue_id, const char *queue_name,
					 CqCounter counter, uint64 n);
extern void cq_count_add(CqCountBatch *batch, int32 queue_id,
						 CqCounter counter, uint64 n);
extern void cq_count_flush(CqCountBatch *batch);
extern void cq_counters_free_dropped(void);
extern void cq_latency_add(CqCountBatch *batch, int32 queue_id,
						   CqLatencyKind kind, int64 usecs);

/* Jobs per queue and state, kept as changes commit (census.c) */
extern Size cq_census_shmem_size(void);
extern void cq_census_shmem_init(LWLock *lock, LWLock *gate);
extern bool cq_census_recount(void);
extern void cq_census_move(Oid relid, int32 queue_id, CqState from,
						   CqState to, int64 n);
extern void cq_census_free_dropped(void);
extern void cq_census_free_database(void);
extern void cq_census_xact_event(XactEvent event);
extern void cq_census_subxact_event(SubXactEvent event);

/* The background reclaimer (reclaimer.c) */
extern Size cq_reclaimer_shmem_size(void);
extern void cq_reclaimer_shmem_init(LWLock *lock);
extern void cq_register_launcher(void);
extern PGDLLEXPORT void cq_launcher_main(Datum arg);
extern PGDLLEXPORT void cq_reclaimer_main(Datum arg);

/*
 * Waiting for work (wakeup.c): a waiting claim or wait_for publishes what
 * it waits for in its slot; commits wake it (cq_wake_waiters, called by
 * the ledger).  wait_for waits under the queue id CQ_WAIT_FINISHED (no
 * queue has it).
 */
#define CQ_WAIT_FINISHED	0
extern Size cq_wakeup_shmem_size(void);
extern void cq_wakeup_shmem_init(void);
extern bool cq_wait_begin(int32 queue_id);
extern void cq_wait_end(void);
#define CQ_POLL_MIN_MS	10		/* without wake-ups, poll after 10 ms, */
#define CQ_POLL_MAX_MS	100		/* doubling up to 100 ms */
/*
 * With wake-ups, the longest a waiter sleeps between looks when a commit
 * it waits for may wake nobody: a claim's scheduled jobs coming due, and
 * work committed by COMMIT PREPARED, which runs none of claimq's commit
 * hooks (the transaction's PREPARE does, long before).
 */
#define CQ_WAKE_RECHECK_MS	1000
extern void cq_wait_sleep(bool waiting, long recheck_ms, long *poll_ms,
						  TimestampTz deadline);
extern void cq_wake_waiters(const int32 *queue_ids, int n, bool all,
							bool finished);

/* Claim floors (floor.c) */
typedef struct CqFloor
{
	TimestampTz run_at;			/* start the claim at (run_at, job_id) */
	int64		job_id;
	int			slot;			/* the rest is for cq_floor_raise */
	uint64		incarnation;
	uint64		seq;
	bool		from_head;
	TimestampTz read_at;
} CqFloor;

extern Size cq_floor_shmem_size(void);
extern void cq_floor_shmem_init(void);
extern void cq_floor_read(int32 queue_id, TimestampTz now, CqFloor *floor);
extern void cq_floor_raise(const CqFloor *floor, TimestampTz run_at,
						   int64 job_id);
extern void cq_floor_lower(Oid dboid, Oid relid, int32 queue_id,
						   TimestampTz run_at);
extern void cq_floor_drop_database(Oid dboid);
extern Oid	cq_job_relid(void);

/* Fair queues' shares in shared memory (fair.c) */
#define CQ_FAIR_KEY_MAX		200 /* bytes of a group key */

typedef struct CqFairPick
{
	text	   *key;			/* the tenant's group key, NULL: none */
	uint64		incarnation;	/* its entry's */
	double		start;
	double		weight;
	int			quota;			/* jobs it is to give */
	int			taken;			/* jobs it gave */
	bool		found;			/* it had a ready job */
} CqFairPick;

typedef struct CqFairHanded
{
	int32		queue_id;
	int32		priority;
	int32		len;			/* -1: the jobs without a group key */
	char		key[CQ_FAIR_KEY_MAX];
	int64		handed;
} CqFairHanded;

extern Size cq_fair_shmem_size(void);
extern void cq_fair_shmem_init(LWLock *lock);
extern bool cq_fair_usable(void);
extern void cq_fair_note_changed(void);
extern void cq_fair_sweep(const int32 *fair_ids, int nfair);
extern void cq_fair_free_dropped(void);
extern bool cq_fair_open(int32 queue_id, int32 priority);
extern uint64 cq_fair_claim_begin(void);
extern int	cq_fair_pick(int32 queue_id, int32 priority, uint64 claim,
						 int chunk, bool fine, CqFairPick *picks,
						 bool *whole);
extern void cq_fair_settle(int32 queue_id, int32 priority, uint64 claim,
						   CqFairPick *picks, int npicks, bool may_raise,
						   bool whole);
extern void cq_fair_charge(int32 queue_id, int32 priority, text **keys,
						   int n);
extern void cq_fair_xact_event(XactEvent event);
extern void cq_fair_subxact_event(SubXactEvent event);
extern int	cq_fair_handed(CqFairHanded **out);

/* Firing schedules (schedule.c): fire_schedules through SPI */
extern uint64 cq_fire_schedules(int32 max_jobs);

/* The sweep of expired key claims (keys.c) */
extern uint64 cq_sweep_keys(int32 max_keys);

/* Pruning of done and dead jobs past their queue's retention (prune.c) */
extern uint64 cq_prune_finished(int32 max_jobs);

/* The columns of claimq.queue that the C paths need. */
typedef struct CqQueue
{
	const char *name;
	int32		queue_id;
	bool		paused;
	bool		notify;
	Interval	lease;
	Interval	run_lease;
	int32		group_limit;	/* 0: none */
	bool		group_fifo;
	int32		max_in_flight;	/* 0: none */
	int32		rate_limit;		/* 0: none */
	Interval	rate_period;
	bool		fair;			/* shares claims by tenant (fair-share.sql) */
	bool		prioritized;	/* a job was enqueued at a priority but 0 */
} CqQueue;

/*
 * Group limits (groups.c): the groups whose jobs a statement changed, to be
 * synced with the queue's group limits.
 */
typedef struct CqGroups
{
	int			n;
	int			size;
	int32	   *queue_ids;
	Datum	   *keys;			/* text */
	/* After a sync: the queues whose held jobs it freed, and from when. */
	int			nfreed;
	int32	   *freed_queue_ids;
	TimestampTz *freed_run_ats;
} CqGroups;

extern bool cq_queue_groups_limited(const CqQueue *queue);
extern void cq_groups_note(CqGroups *groups, int32 queue_id, Datum key);
extern void cq_groups_sync_noted(CqGroups *groups);
extern TimestampTz cq_groups_sync_one(int32 queue_id, Datum keys);
extern uint64 cq_groups_upkeep(CqGroups *groups);

/*
 * Queue-wide limits (limits.c): max_in_flight and rate_limit, and a
 * claim's view of them.  Their shared memory (buckets.c) holds a slot per
 * limited queue, private to buckets.c; a ticket only points to it.
 */
typedef struct CqFlowTicket
{
	struct CqBucketSlot *slot;	/* shared memory: the queue's slot, or NULL */
	uint64		generation;		/* the slot's, when the claim took it */
	uint64		bucket;			/* the bucket it took tokens from */
	int32		reserved;		/* slots reserved by the claim */
	int32		tokens;			/* tokens taken by the claim */
	int32		allowed;
	bool		row_bucket;		/* the fallback: the bucket in the row */
	double		row_tokens;		/* left at "at", before the claim */
	TimestampTz at;
	long		refill_ms;		/* no token: when the next one is whole */
} CqFlowTicket;

extern void cq_flow_upkeep(void);
extern int32 cq_flow_allowance(const CqQueue *queue, int32 max_jobs,
							   CqFlowTicket *ticket);
extern void cq_flow_spend(const CqQueue *queue, CqFlowTicket *ticket,
						  int32 n);

/*
 * The queue row's limits and bucket, read with the latest snapshot by
 * limits.c, from which cq_bucket_reserve makes a bucket in shared memory.
 */
typedef struct CqFlowRow
{
	bool		found;
	int32		max_in_flight;	/* 0: none */
	int32		rate_limit;		/* 0: none */
	int64		period;
	double		tokens;			/* the bucket refilled to now */
} CqFlowRow;

/* What cq_bucket_reserve did. */
typedef enum CqFlowReserve
{
	CQ_FLOW_RESERVED,			/* step 1 is done: see the ticket */
	CQ_FLOW_READ_ROW,			/* nothing yet: read the row, call again */
	CQ_FLOW_NO_SLOT,			/* nothing: take turns on the queue's row */
	CQ_FLOW_TOO_MANY			/* nothing: too many limited queues */
} CqFlowReserve;

/* A bucket in shared memory, for the reclaimer to record in its row. */
typedef struct CqFlowBucket
{
	int32		queue_id;
	int32		rate_limit;
	Interval	period;			/* its time only */
	double		tokens;
	bool		idle;			/* unused since the last look, unrecorded */
	void	   *slot;			/* for cq_bucket_recorded */
	uint64		generation;
	uint64		bucket;
	uint64		spent;
} CqFlowBucket;

/* The queue-wide limits' shared memory (buckets.c) */
extern Size cq_buckets_shmem_size(void);
extern void cq_buckets_shmem_init(LWLock *lock, LWLock *gate);
extern void cq_buckets_free_dropped(void);
extern bool cq_bucket_freed(int32 queue_id);
extern TimestampTz cq_buckets_started(TimestampTz now);
extern long cq_bucket_refill_ms(double tokens, int32 rate_limit, int64 period);
extern CqFlowReserve cq_bucket_reserve(const CqQueue *queue, int64 period,
									   int32 max_jobs, TimestampTz now,
									   const CqFlowRow *row, uint64 *read_for,
									   CqFlowTicket *ticket, int64 *others);
extern bool cq_bucket_row_enter(int32 queue_id, bool *too_many);
extern void cq_bucket_give_back(CqFlowTicket *ticket, int32 n);
extern int	cq_buckets_of_database(TimestampTz now, CqFlowBucket **buckets);
extern void cq_bucket_recorded(const CqFlowBucket *bucket);
extern void cq_buckets_xact_event(XactEvent event);

/*
 * The ledger (ledger.c).  Every change of jobs' states that claimq makes is
 * reported to it once, as a move, by the path that made it; the ledger
 * tells the call's counters and latencies, the census, the wake-ups and
 * floors, and flow control, each what it needs.  A call gathers its moves
 * in a CqLedgerCall and closes it at its end (with SPI connected: the
 * groups noted are synced then).
 */
typedef struct CqMove
{
	int32		queue_id;
	CqState		from;
	CqState		to;
	int64		n;				/* how many jobs */
	int			counter;		/* the CqCounter the call counts them as, or
								 * -1 */
	TimestampTz run_at;			/* to pending: the earliest run_at
								 * (DT_NOBEGIN: not known) */
	int			latency;		/* a CqLatencyKind sampled once, or -1 */
	int64		latency_us;
	Datum		group_key;		/* text: the group of the jobs, or 0 */
	Datum		group_keys;		/* text[]: the groups of the jobs, or 0 */
} CqMove;

typedef struct CqLedgerCall
{
	CqCountBatch counts;
	CqGroups	groups;
	int32		freed_queue;	/* the last queue told that jobs left flight */
} CqLedgerCall;

extern void cq_move_init(CqMove *move, int32 queue_id, CqState from,
						 CqState to, int64 n);
extern void cq_ledger_note(CqLedgerCall *call, const CqMove *move);
extern void cq_ledger_close(CqLedgerCall *call);
extern CqState cq_state_of(Datum state);

/*
 * The ledger's one pair of transaction callbacks, registered when the
 * library is loaded (cq_ledger_init), which call the modules' end of
 * transaction functions (cq_buckets_xact_event, cq_census_xact_event and
 * cq_census_subxact_event) in the order ledger.c states.
 */
extern void cq_ledger_init(void);

/*
 * What a transaction does to the set of pending jobs, besides the moves
 * that tell it: jobs made pending wake waiting claims and lower the
 * queue's claim floor once the commit is visible (and the floor at once,
 * for the transaction's own claims); jobs claimed lower it again if the
 * claim aborts; jobs finished or removed wake wait_for; a sync of groups
 * that freed held jobs makes them ready.
 */
extern void cq_made_ready(int32 queue_id, TimestampTz run_at);
extern void cq_finished_on_commit(void);
extern void cq_claimed_in_xact(int32 queue_id, TimestampTz run_at);
extern TimestampTz cq_xact_ready_run_at(int32 queue_id);
extern void cq_freed_on_commit(int32 queue_id);
extern void cq_ledger_groups_freed(const CqGroups *groups);

/*
 * The census's guard (census.c) stands aside while claimq's own statements
 * run: cq_execute and its kin count them here (common.c), and the SQL
 * functions that write jobs open a scope with claimq.ledger_begin().
 */
extern int	cq_own_statements;

/*
 * Backoff before retry number n (n >= 1, an SQL expression over the
 * claimq.queue row q): retry_base * 2^(n-1), capped at retry_max, less up
 * to 20% random jitter so that retries of one batch spread out.
 */
#define CQ_BACKOFF_SQL(n) \
	"pg_catalog.make_interval(secs => LEAST(" \
	"pg_catalog.date_part('epoch', q.retry_base)" \
	" * pg_catalog.power(2::float8, LEAST(GREATEST((" n ") - 1, 0), 60))," \
	" pg_catalog.date_part('epoch', q.retry_max))" \
	" * (1 - 0.2 * pg_catalog.random()))"

/* common.c: argument checks; each raises the contract's SQLSTATE */
extern void cq_require_primary(FunctionCallInfo fcinfo);
extern void cq_arg_not_null(FunctionCallInfo fcinfo, int argno,
							const char *argname);
extern char *cq_name_arg(FunctionCallInfo fcinfo, int argno, const char *what);
#define cq_queue_name_arg(fcinfo, argno) cq_name_arg(fcinfo, argno, "queue")
extern ArrayType *cq_job_ids_arg(FunctionCallInfo fcinfo, int argno);
extern TimestampTz cq_time_plus(TimestampTz t, const Interval *span);
extern Interval *cq_interval_arg(FunctionCallInfo fcinfo, int argno,
								 const char *argname, bool zero_ok,
								 const Interval *max, const char *max_text);

/* A lease or wait: at most 7 days. */
extern const Interval cq_max_lease;
#define cq_lease_arg(fcinfo, argno, argname, zero_ok) \
	cq_interval_arg(fcinfo, argno, argname, zero_ok, &cq_max_lease, "7 days")
/* A retry delay, a retention or a ttl: at most 100 years. */
extern const Interval cq_max_delay;
#define cq_delay_arg(fcinfo, argno, argname, zero_ok) \
	cq_interval_arg(fcinfo, argno, argname, zero_ok, &cq_max_delay, "100 years")
extern int32 cq_int_arg(FunctionCallInfo fcinfo, int argno,
						const char *argname, int32 min, int32 max);
extern ArrayType *cq_array_arg(FunctionCallInfo fcinfo, int argno,
							   const char *argname, bool nulls_ok);

/*
 * The producer lock of a queue: a transaction-level advisory lock on
 * (CQ_PRODUCER_LOCK_KEY, hashtext(queue name)).  enqueue holds it shared;
 * drop_queue and retry_dead hold it exclusive, so that no job is inserted
 * into a queue being dropped and no live dedup key appears while dead jobs
 * are redriven.  The SQL-language functions take it with
 * claimq.lock_producers(), which is cq_lock_producers(name, true).
 */
#define CQ_PRODUCER_LOCK_KEY	1668050289	/* 'clmq' */
extern void cq_lock_producers(const char *queue_name, bool exclusive);
extern bool cq_try_lock_producers(const char *queue_name, bool exclusive,
								  bool wait);

/*
 * Tokens (token.c): the server lifetime's epoch (claimq.epoch) in bits 48
 * and up plus a value of claimq.token_seq, which stays below 2^48; durable
 * before they are handed out, so that none repeats after a crash or a
 * failover.
 */
#define CQ_TOKEN_EPOCH_BITS		48
extern int64 cq_token_epoch(void);
extern void cq_tokens_durable(void);

/* Job ids (common.c): claimq.node_id in bits 48 and up. */
extern int64 cq_job_id_base(void);

/* common.c: SPI helpers (the caller has done SPI_connect) */
extern SPIPlanPtr cq_plan(SPIPlanPtr *cache, const char *sql,
						  int nargs, Oid *argtypes);
extern SPIPlanPtr cq_plan_unrouted(SPIPlanPtr *cache, const char *sql,
								   int nargs, Oid *argtypes);
extern void cq_execute(SPIPlanPtr plan, Datum *values, const char *nulls,
					   int expected);
extern void cq_execute_latest(SPIPlanPtr plan, Datum *values,
							  const char *nulls, int expected);
extern void cq_execute_in(SPIPlanPtr plan, Datum *values, const char *nulls,
						  int expected, Snapshot snapshot);
extern bool cq_lookup_queue(const char *name, CqQueue *queue);
extern HTAB *cq_shmem_table(const char *name, long entries, Size keysize,
							Size entrysize);
extern void cq_lwlock_gated(LWLock *lock, LWLock *gate, LWLockMode mode);
extern void cq_note_database(Oid *dboids, int *n, int max, Oid dboid);
extern int	cq_dropped_databases(Oid *dboids, int n);

/*
 * A call's input pairs matched against a statement's rows (common.c): a
 * job id (str NULL) or a dedup key, and a token, mapped to a value.
 */
typedef struct CqPairKey
{
	const char *str;			/* a key (not copied), or NULL */
	int64		num;			/* a job id, or 0 */
	int64		token;
} CqPairKey;

typedef struct CqPairEntry
{
	CqPairKey	key;
	int64		value;			/* settle: the result row; keys: the token */
	bool		done;			/* keys: already returned */
} CqPairEntry;

extern HTAB *cq_pair_table(const char *name, long size);
extern CqPairEntry *cq_pair(HTAB *table, const char *str, int64 num,
							int64 token, bool enter);
extern void cq_require_queue(const char *name, CqQueue *queue);

/*
 * The trailing "queue" argument of the settle and job calls (common.c):
 * on a single server it only checks that every job found is in that
 * queue (22023 if one is not, 42704 if the queue does not exist).  Begin
 * with the argument, pass each job found, then end; the queue is looked
 * up only when a backend-local note of its id cannot vouch for it.
 */
typedef struct CqInQueue
{
	const char *name;			/* NULL: not given, nothing to check */
	int32		queue_id;		/* the id noted for name, or 0 */
	bool		confirmed;		/* a job of queue_id was found */
	bool		looked_up;		/* queue_id was read by this call */
} CqInQueue;

extern void cq_in_queue_begin(CqInQueue *check, FunctionCallInfo fcinfo,
							  int argno);
extern void cq_in_queue_job(CqInQueue *check, int64 job_id, int32 queue_id);
extern void cq_in_queue_end(CqInQueue *check);
extern void cq_in_queue_jobs(CqInQueue *check, Datum ids);
extern Datum cq_spi_value(int row, int col, bool *isnull);

/*
 * Workflows (workflow.c).  An enqueue's "after" and "after_failed"
 * arguments, and what linking them found.
 */
typedef struct CqAfter
{
	ArrayType  *ids;			/* NULL: after no job (NULL or empty) */
	bool		run;			/* after_failed => 'run' */
	int64		set_id;			/* once linked */
	int32		unfinished;
	bool		all_done;		/* the finished ones all ended done */
} CqAfter;

extern void cq_after_args(FunctionCallInfo fcinfo, int argno, CqAfter *after);
extern void cq_after_link(CqAfter *after);
extern const char *cq_after_state(const CqAfter *after);
extern void cq_after_unlink(CqAfter *after);

/*
 * What one call finished or deleted, for section 8 of sql/claimq.sql:
 * jobs with dependents that finished or were deleted (their dependents are
 * judged), and the sets of jobs to run after of jobs deleted.
 */
typedef struct CqFinishes
{
	int			njobs;
	int			nsets;
	int			maxjobs;
	int			maxsets;
	Datum	   *jobs;
	Datum	   *sets;
} CqFinishes;

extern void cq_finished_job(CqFinishes *finishes, int64 job_id);
extern void cq_deleted_set(CqFinishes *finishes, int64 set_id);
extern void cq_finishes_settle(CqFinishes *finishes, bool deleted);

/* reclaim.c: shared with the background reclaimer */
extern uint64 cq_reclaim_expired(int32 queue_id, int32 max_jobs,
								 Tuplestorestate *result, TupleDesc desc);

/* shard.c: a distributed install's routes */
extern void cq_shard_init(void);
extern bool cq_distributed(void);
extern void cq_notify(const char *queue_name);
extern bool cq_answered_elsewhere(FunctionCallInfo fcinfo, int queue_argno,
								  int timeout_argno, TimestampTz deadline,
								  Datum *result);
extern bool cq_forward_wanted(const char *name);
extern bool cq_forward_wanted_arg(FunctionCallInfo fcinfo, int argno);
extern bool cq_forward_wanted_scope(const char *scope);
extern Datum cq_forward(FunctionCallInfo fcinfo);
extern Datum cq_reclaim_every_queue(FunctionCallInfo fcinfo, int32 max_jobs);
extern int32 cq_local_group(void);
extern void cq_route_to(const char *name);
extern bool cq_routed(void);
extern void cq_route_to_scope(const char *scope);
extern List *cq_local_shards(bool keys);
extern void cq_route_to_shard(int64 shard, bool keys);
extern void cq_route_end(void);
extern void cq_route_ready(void);
extern int64 cq_hand_off_after(bool *more);

#endif							/* CLAIMQ_H */
