/*-------------------------------------------------------------------------
 *
 * reclaimer.c
 *		The background reclaimer: a launcher, and one worker per database
 *		named in claimq.databases, which every claimq.reclaim_interval
 *		reclaims expired claims (reclaim.c), fires due schedules
 *		(sql/schedules.sql, through schedule.c), prunes finished jobs past their retention (prune.c),
 *		sweeps expired key claims (keys.c), keeps flow control (limits.c's
 *		bucket records, groups.c's groups left behind) and recounts the
 *		census when it is unknown (census.c).
 *
 * The launcher is a static background worker, registered when claimq is
 * in shared_preload_libraries.  It starts only once recovery is over, so
 * nothing runs on a standby and serving begins at promotion; after a
 * crash-restart the postmaster starts it again.  It connects to no
 * database, reads the list of databases at start and on SIGHUP, resolves
 * the names in pg_database and starts (or, for names taken off the list,
 * stops) one dynamic worker per database, passing the database's OID in
 * bgw_extra and the worker's status slot in bgw_main_arg.  A worker that
 * exits is started again after CQ_RESTART_DELAY_MS.
 *
 * A worker runs one pass at start (a crash may have left claims behind)
 * and then one per interval.  A pass is a few short transactions, each
 * with its own snapshot, one per step of cq_steps, in order:
 *
 *	reclaim		chunks of claimq.reclaim_batch expired claims (the first
 *				registers the server lifetime's token epoch, token.c)
 *	fire		chunks of up to 1,000 jobs of due schedules
 *	prune		finished jobs past their retention
 *	sweep		expired key claims
 *	flow		rate buckets recorded in their queues' rows
 *	groups		groups left behind synced
 *	hand-off	on a distributed install, the mail of workflows across
 *				shards handed on (shard.c, sql/after-elsewhere.sql)
 *	census		the census recounted, if it is unknown
 *
 * Queue SQL runs as the extension's owner inside a security-restricted
 * operation with search_path pinned, never as the bootstrap superuser with
 * whatever search_path the server was given; each step gives up on a lock
 * after 200 ms (it gives way to DDL) and commits with synchronous_commit =
 * local, so that a synchronous standby that is away does not stop it
 * (docs/operations.md).  When the extension is not installed in the database,
 * a pass does nothing but give back the census entries the database held.  A
 * failing pass is logged once (again only if the error changes), recorded in
 * reclaimer_status, and retried after a growing pause, up to
 * CQ_MAX_BACKOFF_MS.
 *
 * A worker stays connected to its database between passes, which would
 * make DROP DATABASE fail ("being accessed by other users"): so at least
 * once a second it probes the database's lock, which DROP DATABASE (and
 * CREATE DATABASE using it as a template) holds while it waits for
 * sessions to leave, and exits if it cannot get it.
 *
 * The launcher also frees, once a second, what databases that no longer
 * exist left in shared memory (the census's, the counters' and the
 * queue-wide limits' entries), whether or not it serves them.
 *
 * maintain() does the first four steps once, in its caller's
 * transaction, for a scheduler to call where the reclaimer does not run.
 *
 * Shared state: one status slot per served database, under claimq's
 * LWLock.  The launcher assigns slots; each worker writes only its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/tableam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/indexing.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_reclaimer_status);
PG_FUNCTION_INFO_V1(claimq_maintain);

#define CQ_RESTART_DELAY_MS		10000	/* before starting a worker again */
#define CQ_MAX_BACKOFF_MS		60000	/* between passes that keep failing */
#define CQ_PROBE_INTERVAL_MS	1000	/* DROP DATABASE probe, at least */
#define CQ_MAX_CHUNKS			100 /* reclaim transactions per pass */
#define CQ_ERROR_LEN			256

typedef struct CqDbSlot
{
	bool		in_use;
	char		dbname[NAMEDATALEN];
	Oid			dboid;
	pid_t		pid;
	TimestampTz last_run;
	int64		last_reclaimed;
	int64		total_reclaimed;
	char		last_error[CQ_ERROR_LEN];
} CqDbSlot;

typedef struct CqReclaimerShared
{
	LWLock	   *lock;
	CqDbSlot	slots[CQ_MAX_DATABASES];
} CqReclaimerShared;

static CqReclaimerShared *cq_shared = NULL;

Size
cq_reclaimer_shmem_size(void)
{
	return MAXALIGN(sizeof(CqReclaimerShared));
}

void
cq_reclaimer_shmem_init(LWLock *lock)
{
	bool		found;

	cq_shared = ShmemInitStruct("claimq reclaimer", sizeof(CqReclaimerShared),
								&found);
	if (!found)
	{
		memset(cq_shared, 0, sizeof(CqReclaimerShared));
		cq_shared->lock = lock;
	}
}

static void
cq_slot_set_error(int slotno, const char *message)
{
	LWLockAcquire(cq_shared->lock, LW_EXCLUSIVE);
	strlcpy(cq_shared->slots[slotno].last_error, message ? message : "",
			CQ_ERROR_LEN);
	LWLockRelease(cq_shared->lock);
}

void
cq_register_launcher(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	strlcpy(worker.bgw_library_name, "claimq", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "cq_launcher_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "claimq launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "claimq launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/* ----------------------------------------------------------------------
 * The launcher
 * ----------------------------------------------------------------------
 */

/* What the launcher knows of each slot besides the shared part. */
typedef struct CqLauncherSlot
{
	BackgroundWorkerHandle *handle;
	TimestampTz not_before;		/* earliest time to start a worker */
	bool		warned;			/* said once that the database is missing */
} CqLauncherSlot;

static CqLauncherSlot cq_launcher_slots[CQ_MAX_DATABASES];

/*
 * Split claimq.databases on commas, trimming blanks.  Database names that
 * contain a comma cannot be listed.
 */
static List *
cq_database_names(void)
{
	List	   *names = NIL;
	char	   *copy = pstrdup(cq_databases ? cq_databases : "");
	char	   *next = copy;

	while (next != NULL)
	{
		char	   *item = next;
		char	   *end;

		next = strchr(item, ',');
		if (next)
			*next++ = '\0';
		while (*item == ' ' || *item == '\t')
			item++;
		end = item + strlen(item);
		while (end > item && (end[-1] == ' ' || end[-1] == '\t'))
			*--end = '\0';
		if (*item != '\0' && !list_member(names, makeString(item)))
			names = lappend(names, makeString(item));
	}
	return names;
}

/*
 * OID of the database of that name, or InvalidOid.  The launcher is not
 * connected to any database, so it reads pg_database (a shared catalog)
 * with a plain heap scan: its indexes cannot be opened from here.
 */
static Oid
cq_database_oid(const char *name)
{
	Relation	rel = table_open(DatabaseRelationId, AccessShareLock);
	TableScanDesc scan = table_beginscan_catalog(rel, 0, NULL);
	HeapTuple	tuple;
	Oid			dboid = InvalidOid;

	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tuple);

		if (strcmp(NameStr(db->datname), name) == 0 && db->datallowconn)
		{
			dboid = db->oid;
			break;
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	return dboid;
}

static void
cq_start_worker(int slotno)
{
	CqDbSlot   *slot = &cq_shared->slots[slotno];
	CqLauncherSlot *local = &cq_launcher_slots[slotno];
	BackgroundWorker worker;
	MemoryContext oldcxt;
	bool		registered;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "claimq", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "cq_reclaimer_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "claimq reclaimer for database %s",
			 slot->dbname);
	strlcpy(worker.bgw_type, "claimq reclaimer", BGW_MAXLEN);
	worker.bgw_main_arg = Int32GetDatum(slotno);
	memcpy(worker.bgw_extra, &slot->dboid, sizeof(Oid));
	worker.bgw_notify_pid = MyProcPid;

	/* The handle outlives the launcher's transaction. */
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	registered = RegisterDynamicBackgroundWorker(&worker, &local->handle);
	MemoryContextSwitchTo(oldcxt);
	if (!registered)
	{
		local->handle = NULL;
		local->not_before = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														CQ_RESTART_DELAY_MS);
		ereport(LOG,
				(errmsg("claimq launcher could not start a reclaimer for database \"%s\"",
						slot->dbname),
				 errhint("Raise max_worker_processes.")));
	}
}

static void
cq_stop_worker(int slotno)
{
	CqLauncherSlot *local = &cq_launcher_slots[slotno];

	if (local->handle)
	{
		TerminateBackgroundWorker(local->handle);
		pfree(local->handle);
		local->handle = NULL;
	}
}

/*
 * Bring the running workers in line with claimq.databases.
 */
static void
cq_launcher_sync(void)
{
	List	   *names;
	ListCell   *lc;
	TimestampTz now = GetCurrentTimestamp();
	bool		wanted[CQ_MAX_DATABASES] = {0};

	names = cq_database_names();

	StartTransactionCommand();
	foreach(lc, names)
	{
		char	   *name = strVal(lfirst(lc));
		Oid			dboid = cq_database_oid(name);
		int			slotno = -1;
		int			free_slot = -1;

		for (int i = 0; i < CQ_MAX_DATABASES; i++)
		{
			if (cq_shared->slots[i].in_use &&
				strcmp(cq_shared->slots[i].dbname, name) == 0)
				slotno = i;
			else if (!cq_shared->slots[i].in_use && free_slot < 0)
				free_slot = i;
		}
		if (slotno < 0)
		{
			if (free_slot < 0)
			{
				ereport(LOG,
						(errmsg("claimq launcher serves at most %d databases; \"%s\" is not served",
								CQ_MAX_DATABASES, name)));
				continue;
			}
			slotno = free_slot;
			LWLockAcquire(cq_shared->lock, LW_EXCLUSIVE);
			memset(&cq_shared->slots[slotno], 0, sizeof(CqDbSlot));
			cq_shared->slots[slotno].in_use = true;
			strlcpy(cq_shared->slots[slotno].dbname, name, NAMEDATALEN);
			LWLockRelease(cq_shared->lock);
			memset(&cq_launcher_slots[slotno], 0, sizeof(CqLauncherSlot));
		}
		wanted[slotno] = true;

		if (cq_shared->slots[slotno].dboid != dboid)
		{
			/* Created, dropped or re-created under the same name. */
			CqDbSlot   *slot = &cq_shared->slots[slotno];

			cq_stop_worker(slotno);
			LWLockAcquire(cq_shared->lock, LW_EXCLUSIVE);
			slot->dboid = dboid;
			slot->last_run = 0;
			slot->last_reclaimed = slot->total_reclaimed = 0;
			slot->last_error[0] = '\0';
			LWLockRelease(cq_shared->lock);
		}
		if (!OidIsValid(dboid))
		{
			if (!cq_launcher_slots[slotno].warned)
				ereport(LOG,
						(errmsg("database \"%s\" named in claimq.databases does not exist", name),
						 errdetail("It is named in claimq.databases; it will be served once it exists.")));
			cq_launcher_slots[slotno].warned = true;
			cq_slot_set_error(slotno, "database does not exist");
			continue;
		}
		cq_launcher_slots[slotno].warned = false;

		if (cq_launcher_slots[slotno].handle)
		{
			pid_t		pid;

			if (GetBackgroundWorkerPid(cq_launcher_slots[slotno].handle, &pid) !=
				BGWH_STOPPED)
				continue;
			/* It exited: start another one, but not at once. */
			pfree(cq_launcher_slots[slotno].handle);
			cq_launcher_slots[slotno].handle = NULL;
			cq_launcher_slots[slotno].not_before =
				TimestampTzPlusMilliseconds(now, CQ_RESTART_DELAY_MS);
		}
		if (now >= cq_launcher_slots[slotno].not_before)
			cq_start_worker(slotno);
	}

	/* Room in shared memory: what dropped databases left there goes. */
	cq_census_free_dropped();
	cq_counters_free_dropped();
	cq_buckets_free_dropped();
	cq_fair_free_dropped();
	CommitTransactionCommand();

	/* Stop serving databases taken off the list. */
	for (int i = 0; i < CQ_MAX_DATABASES; i++)
	{
		if (!cq_shared->slots[i].in_use || wanted[i])
			continue;
		cq_stop_worker(i);
		LWLockAcquire(cq_shared->lock, LW_EXCLUSIVE);
		cq_shared->slots[i].in_use = false;
		LWLockRelease(cq_shared->lock);
	}
}

void
cq_launcher_main(Datum arg)
{
	MemoryContext loopcxt;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	/* Slots of a previous launcher (before a crash-restart) are stale. */
	LWLockAcquire(cq_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < CQ_MAX_DATABASES; i++)
		cq_shared->slots[i].in_use = false;
	LWLockRelease(cq_shared->lock);

	/* What one look at the list allocates is freed before the next. */
	loopcxt = AllocSetContextCreate(TopMemoryContext, "claimq launcher",
									ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		MemoryContextSwitchTo(loopcxt);
		cq_launcher_sync();
		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextReset(loopcxt);
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 CQ_PROBE_INTERVAL_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/* ----------------------------------------------------------------------
 * A worker
 * ----------------------------------------------------------------------
 */

static int	cq_my_slot = -1;

static void
cq_reclaimer_detach(int code, Datum arg)
{
	LWLockAcquire(cq_shared->lock, LW_EXCLUSIVE);
	if (cq_shared->slots[cq_my_slot].pid == MyProcPid)
		cq_shared->slots[cq_my_slot].pid = 0;
	LWLockRelease(cq_shared->lock);
}

/*
 * True if DROP DATABASE, or CREATE DATABASE with this one as template, or
 * another command that needs this database to itself, is waiting for us
 * to leave.  Called inside a transaction.
 */
static bool
cq_database_wanted_alone(void)
{
	LOCKTAG		tag;

	/* The lock a new session takes: DROP and template use conflict with it. */
	SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, MyDatabaseId, 0);
	if (LockAcquire(&tag, RowExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, RowExclusiveLock, false);
	return false;
}

/*
 * Owner of the claimq extension in this database, or InvalidOid if it is
 * not installed.
 */
static Oid
cq_extension_owner(void)
{
	Oid			extoid = get_extension_oid("claimq", true);
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Oid			owner = InvalidOid;

	if (!OidIsValid(extoid))
		return InvalidOid;
	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(extoid));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		owner = ((Form_pg_extension) GETSTRUCT(tuple))->extowner;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return owner;
}

/* Jobs a pass's call of fire_schedules enqueues at most (its default). */
#define CQ_FIRE_BATCH	1000

/*
 * The steps of a pass, in order, each in a transaction of its own (see
 * the file header).  A step returns how many jobs or keys it handled and
 * sets *more when it stopped at its batch, to be run again in a new
 * transaction, up to CQ_MAX_CHUNKS times.
 */
typedef int64 (*CqStepFn) (bool *more);

/*
 * Where a step runs on a distributed install (shard.c): once per shard of
 * the queues, or of the key claims, placed on this node, once (routing its
 * statements itself), or not yet.
 */
typedef enum CqStepShards
{
	CQ_STEP_QUEUE_SHARDS,
	CQ_STEP_KEY_SHARDS,
	CQ_STEP_ROUTES_ITSELF,
	CQ_STEP_NOT_DISTRIBUTED
} CqStepShards;

typedef struct CqStep
{
	const char *activity;		/* what pg_stat_activity shows meanwhile
								 * (maintain(): its row's step) */
	CqStepFn	run;
	CqStepShards shards;		/* on a distributed install */
} CqStep;

static int64
cq_step_reclaim(bool *more)
{
	int64		n;

	/* Registers a new lifetime's epoch before clients look for it. */
	(void) cq_token_epoch();
	n = (int64) cq_reclaim_expired(0, cq_reclaim_batch, NULL, NULL);
	*more = n >= cq_reclaim_batch;
	return n;
}

static int64
cq_step_fire(bool *more)
{
	int64		n = (int64) cq_fire_schedules(CQ_FIRE_BATCH);

	*more = n >= CQ_FIRE_BATCH;
	return n;
}

static int64
cq_step_prune(bool *more)
{
	return (int64) cq_prune_finished(cq_reclaim_batch);
}

static int64
cq_step_sweep(bool *more)
{
	return (int64) cq_sweep_keys(cq_reclaim_batch);
}

static int64
cq_step_flow(bool *more)
{
	cq_flow_upkeep();
	return 0;
}

static int64
cq_step_groups(bool *more)
{
	CqGroups	groups = {0};
	int64		n;

	n = (int64) cq_groups_upkeep(&groups);
	cq_ledger_groups_freed(&groups);
	return n;
}

static int64
cq_step_census(bool *more)
{
	return cq_census_recount() ? 1 : 0;
}

/*
 * The first step's count is the pass's: the claims it reclaimed.  On a
 * distributed install a node's pass reclaims, fires the schedules of,
 * prunes, keeps the rate buckets of, syncs the groups of and hands off the
 * workflow mail of the queues, and sweeps the key claims, whose shards it
 * holds, a shard at a time; the other steps do not run
 * there yet (docs/distributed.md).
 */
static const CqStep cq_steps[] = {
	{"claimq: reclaiming expired claims", cq_step_reclaim, CQ_STEP_QUEUE_SHARDS},
	{"claimq: firing schedules", cq_step_fire, CQ_STEP_QUEUE_SHARDS},
	{"claimq: pruning finished jobs", cq_step_prune, CQ_STEP_QUEUE_SHARDS},
	{"claimq: sweeping expired key claims", cq_step_sweep, CQ_STEP_KEY_SHARDS},
	{"claimq: keeping flow control", cq_step_flow, CQ_STEP_ROUTES_ITSELF},
	{"claimq: syncing group limits", cq_step_groups, CQ_STEP_QUEUE_SHARDS},
	{"claimq: handing off workflows across shards", cq_hand_off_after, CQ_STEP_QUEUE_SHARDS},
	{"claimq: counting jobs per queue and state", cq_step_census, CQ_STEP_NOT_DISTRIBUTED},
};

/*
 * A step's run in this database: once, or on a distributed install once
 * per shard placed here, each under its route.
 */
static int64
cq_step_run(const CqStep *step, bool *more)
{
	List	   *shards;
	ListCell   *lc;
	int64		result = 0;

	if (!cq_distributed() || step->shards == CQ_STEP_ROUTES_ITSELF)
		return step->run(more);
	if (step->shards == CQ_STEP_NOT_DISTRIBUTED)
		return 0;
	shards = cq_local_shards(step->shards == CQ_STEP_KEY_SHARDS);
	foreach(lc, shards)
	{
		bool		shard_more = false;

		cq_route_to_shard(*(int64 *) lfirst(lc),
						  step->shards == CQ_STEP_KEY_SHARDS);
		result += step->run(&shard_more);
		*more = *more || shard_more;
	}
	cq_route_end();
	return result;
}

/*
 * One transaction of a pass: the step, run as the extension's owner with
 * search_path pinned.  Returns what the step returned, or -1 if the
 * extension is not installed here (the first step then gives back what
 * the census kept of this database).
 */
static int64
cq_pass_step(const CqStep *step, bool *more)
{
	Oid			owner;
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
	int64		result = -1;

	*more = false;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();

	/*
	 * The pass's commits do not wait for a synchronous standby: a reclaim
	 * lost in a failover is done again by the new primary's reclaimer, and an
	 * occurrence fired in a commit the standby never got fires again there,
	 * as Schedules says; waiting would stop every database's reclaims and
	 * schedules while a standby is away.  They are flushed locally all the
	 * same (which also keeps a registration of a token epoch synchronous).
	 */
	(void) set_config_option("synchronous_commit", "local",
							 PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, step->activity);

	owner = cq_extension_owner();
	if (RecoveryInProgress())
		result = 0;				/* not reached: the launcher waits for
								 * promotion */
	else if (!OidIsValid(owner))
	{
		/* Dropped, or never here: what the census kept of it goes. */
		if (step == &cq_steps[0])
			cq_census_free_database();
	}
	else
	{
		GetUserIdAndSecContext(&save_userid, &save_sec_context);
		SetUserIdAndSecContext(owner, save_sec_context |
							   SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_RESTRICTED_OPERATION);
		save_nestlevel = NewGUCNestLevel();
		(void) set_config_option("search_path", "pg_catalog, pg_temp",
								 PGC_SUSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);

		/*
		 * Give way to DDL: a pass that has to wait for a table lock gives up
		 * well before a deadlock check could pick the other side (say a DROP
		 * EXTENSION) as the victim.
		 */
		(void) set_config_option("lock_timeout", "200ms",
								 PGC_SUSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		(void) set_config_option("statement_timeout", "5min",
								 PGC_SUSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);

		SPI_connect();
		result = cq_step_run(step, more);
		SPI_finish();

		AtEOXact_GUC(true, save_nestlevel);
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}

	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	return result;
}

/*
 * A whole pass: every step, each again while it has more.  Returns the
 * number of claims reclaimed, or -1 if the extension is not installed.
 */
static int64
cq_pass(void)
{
	int64		reclaimed = 0;

	for (int i = 0; i < (int) lengthof(cq_steps); i++)
	{
		for (int chunk = 0; chunk < CQ_MAX_CHUNKS; chunk++)
		{
			bool		more;
			int64		n = cq_pass_step(&cq_steps[i], &more);

			if (n < 0)
				return -1;
			if (i == 0)
				reclaimed += n;
			if (!more)
				break;
		}
	}
	return reclaimed;
}

/* A pass ended: record it in this worker's status slot. */
static void
cq_slot_pass_done(int64 reclaimed)
{
	CqDbSlot   *slot = &cq_shared->slots[cq_my_slot];

	LWLockAcquire(cq_shared->lock, LW_EXCLUSIVE);
	slot->last_run = GetCurrentTimestamp();
	if (reclaimed >= 0)
	{
		slot->last_reclaimed = reclaimed;
		slot->total_reclaimed += reclaimed;
		slot->last_error[0] = '\0';
	}
	else
		strlcpy(slot->last_error,
				"extension \"claimq\" is not installed in this database",
				CQ_ERROR_LEN);
	LWLockRelease(cq_shared->lock);
}

/*
 * What a worker remembers between passes: the failure last logged (so
 * that it is logged again only if it changes), whether it said the
 * extension is not installed, and the pause after a failure.
 */
typedef struct CqPassLog
{
	char	   *last_failure;
	bool		said_not_installed;
	long		backoff_ms;
} CqPassLog;

/*
 * Run a pass, catching its error: record and log the outcome, and set the
 * pause before the next pass after a failure.  Allocates in loopcxt,
 * which the caller resets.
 */
static void
cq_run_pass(MemoryContext loopcxt, CqPassLog *plog)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(loopcxt);

	PG_TRY();
	{
		int64		n = cq_pass();

		cq_slot_pass_done(n);
		if (n < 0 && !plog->said_not_installed)
			ereport(LOG,
					(errmsg("extension \"claimq\" is not installed in database \"%s\"",
							cq_shared->slots[cq_my_slot].dbname),
					 errdetail("The claimq reclaimer will start its work once it is.")));
		plog->said_not_installed = (n < 0);
		if (plog->last_failure)
		{
			ereport(LOG,
					(errmsg("claimq reclaimer passes succeed again")));
			pfree(plog->last_failure);
			plog->last_failure = NULL;
		}
		plog->backoff_ms = 0;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(loopcxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		pgstat_report_activity(STATE_IDLE, NULL);

		if (plog->last_failure == NULL ||
			strcmp(plog->last_failure, edata->message) != 0)
		{
			ereport(LOG,
					(errcode(edata->sqlerrcode),
					 errmsg("claimq reclaimer pass failed with SQLSTATE %s: %s",
							unpack_sql_state(edata->sqlerrcode),
							edata->message),
					 errdetail("The pass will be retried; this is logged again only if the error changes.")));
			if (plog->last_failure)
				pfree(plog->last_failure);
			plog->last_failure = MemoryContextStrdup(TopMemoryContext,
													 edata->message);
		}
		cq_slot_set_error(cq_my_slot, edata->message);
		plog->backoff_ms = plog->backoff_ms == 0 ?
			Max(cq_reclaim_interval, 1000) :
			Min(plog->backoff_ms * 2, CQ_MAX_BACKOFF_MS);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcxt);
}

/* This worker takes its status slot, unless the launcher gave it away. */
static void
cq_slot_attach(Oid dboid)
{
	LWLockAcquire(cq_shared->lock, LW_EXCLUSIVE);
	if (cq_shared->slots[cq_my_slot].dboid != dboid)
	{
		LWLockRelease(cq_shared->lock);
		proc_exit(0);
	}
	cq_shared->slots[cq_my_slot].pid = MyProcPid;
	LWLockRelease(cq_shared->lock);
	before_shmem_exit(cq_reclaimer_detach, (Datum) 0);
}

void
cq_reclaimer_main(Datum arg)
{
	Oid			dboid;
	MemoryContext loopcxt;
	CqPassLog	plog = {NULL, false, 0};
	TimestampTz next_pass = 0;
	TimestampTz last_pass = 0;

	cq_my_slot = DatumGetInt32(arg);
	memcpy(&dboid, MyBgworkerEntry->bgw_extra, sizeof(Oid));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	cq_slot_attach(dboid);
	loopcxt = AllocSetContextCreate(TopMemoryContext, "claimq reclaimer",
									ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		TimestampTz now;
		long		sleep_ms = CQ_PROBE_INTERVAL_MS;
		bool		leave;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			/* A new interval counts from the last pass. */
			if (last_pass > 0 && plog.backoff_ms == 0)
				next_pass = TimestampTzPlusMilliseconds(last_pass,
														cq_reclaim_interval);
		}

		/* Leave at once if DROP DATABASE is waiting for us. */
		StartTransactionCommand();
		leave = cq_database_wanted_alone();
		CommitTransactionCommand();
		if (leave)
			proc_exit(0);

		now = GetCurrentTimestamp();
		if (!cq_reclaimer_enabled)
			cq_slot_set_error(cq_my_slot, "paused: claimq.reclaimer is off");
		else if (now >= next_pass)
		{
			cq_run_pass(loopcxt, &plog);
			MemoryContextReset(loopcxt);
			last_pass = now = GetCurrentTimestamp();
			next_pass = TimestampTzPlusMilliseconds(last_pass, plog.backoff_ms > 0 ?
													plog.backoff_ms :
													cq_reclaim_interval);
		}

		if (cq_reclaimer_enabled && next_pass > now)
			sleep_ms = Min(sleep_ms, (next_pass - now + 999) / 1000);
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}


/*
 * maintain() returns table(step text, count bigint): one pass of the
 * reclaimer's steps in the caller's transaction, always one row per step
 * in this order, for a scheduler to call where no reclaimer runs (on a
 * distributed install, as the reclaimer's pass there: cq_step_run).  It
 * runs as its definer, like reclaim() and prune().
 */
static int64
cq_maintain_reclaim(bool *more)
{
	return (int64) cq_reclaim_expired(0, CQ_MAINTAIN_BATCH, NULL, NULL);
}

static int64
cq_maintain_fire(bool *more)
{
	return (int64) cq_fire_schedules(CQ_MAINTAIN_BATCH);
}

static int64
cq_maintain_prune(bool *more)
{
	return (int64) cq_prune_finished(CQ_MAINTAIN_BATCH);
}

static int64
cq_maintain_sweep(bool *more)
{
	return (int64) cq_sweep_keys(CQ_MAINTAIN_BATCH);
}

static const CqStep cq_maintain_steps[] = {
	{"reclaim", cq_maintain_reclaim, CQ_STEP_QUEUE_SHARDS},
	{"fire_schedules", cq_maintain_fire, CQ_STEP_QUEUE_SHARDS},
	{"prune", cq_maintain_prune, CQ_STEP_QUEUE_SHARDS},
	{"sweep_keys", cq_maintain_sweep, CQ_STEP_KEY_SHARDS},
};

Datum
claimq_maintain(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int64		counts[lengthof(cq_maintain_steps)];

	cq_require_primary(fcinfo);
	InitMaterializedSRF(fcinfo, 0);

	SPI_connect();
	/* A new lifetime's epoch is registered here, if no claim did yet. */
	(void) cq_token_epoch();
	for (int i = 0; i < (int) lengthof(cq_maintain_steps); i++)
	{
		bool		more = false;

		counts[i] = cq_step_run(&cq_maintain_steps[i], &more);
	}
	SPI_finish();

	for (int i = 0; i < (int) lengthof(cq_maintain_steps); i++)
	{
		Datum		values[2] = {CStringGetTextDatum(cq_maintain_steps[i].activity),
		Int64GetDatum(counts[i])};
		bool		nulls[2] = {false, false};

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 values, nulls);
	}
	return (Datum) 0;
}

/*
 * reclaimer_status() returns table(database, pid, last_run, last_reclaimed,
 * total_reclaimed, last_error): this database's row, if it is served.
 * Without the preload, one row for this database says that no reclaimer
 * runs.
 */
Datum
claimq_reclaimer_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	CqDbSlot	slots[CQ_MAX_DATABASES];

	InitMaterializedSRF(fcinfo, 0);

	if (!cq_shmem_ready)
	{
		Datum		values[6] = {0};
		bool		nulls[6] = {false, true, true, false, false, false};
		char	   *dbname = get_database_name(MyDatabaseId);

		values[0] = CStringGetTextDatum(dbname ? dbname : "");
		values[3] = Int64GetDatum(0);
		values[4] = Int64GetDatum(0);
		values[5] = CStringGetTextDatum("not running: claimq is not in shared_preload_libraries");
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		return (Datum) 0;
	}

	LWLockAcquire(cq_shared->lock, LW_SHARED);
	memcpy(slots, cq_shared->slots, sizeof(slots));
	LWLockRelease(cq_shared->lock);

	for (int i = 0; i < CQ_MAX_DATABASES; i++)
	{
		Datum		values[6];
		bool		nulls[6] = {0};

		/* Each database sees only its own row. */
		if (!slots[i].in_use || slots[i].dboid != MyDatabaseId)
			continue;
		values[0] = CStringGetTextDatum(slots[i].dbname);
		values[1] = Int32GetDatum(slots[i].pid);
		nulls[1] = (slots[i].pid == 0);
		values[2] = TimestampTzGetDatum(slots[i].last_run);
		nulls[2] = (slots[i].last_run == 0);
		values[3] = Int64GetDatum(slots[i].last_reclaimed);
		values[4] = Int64GetDatum(slots[i].total_reclaimed);
		values[5] = CStringGetTextDatum(slots[i].last_error);
		nulls[5] = (slots[i].last_error[0] == '\0');
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
