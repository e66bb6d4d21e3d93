/*-------------------------------------------------------------------------
 *
 * claimq.c
 *		The module's root: _PG_init, the settings, and shared memory's
 *		request and start-up.  Nothing calls into this file; the helpers
 *		every entry point shares are in common.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/guc.h"

#include "claimq.h"

PG_MODULE_MAGIC;

/* Settings; see _PG_init */
int			cq_node_id = 0;
char	   *cq_databases = NULL;
int			cq_reclaim_interval = 1000;
int			cq_reclaim_batch = 10000;
bool		cq_claim_floors = true;
bool		cq_reclaimer_enabled = true;
int			cq_census_entries = 16384;
int			cq_flow_slots = 1024;
int			cq_counter_entries = 1024;
int			cq_floor_slots = 1024;

/* Set once this backend has attached to claimq's shared memory. */
bool		cq_shmem_ready = false;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

void		_PG_init(void);
static void cq_shmem_request(void);
static void cq_shmem_startup(void);

void
_PG_init(void)
{
	/* Reloadable settings exist in every session that loads the module. */
	DefineCustomIntVariable("claimq.node_id",
							"Node number of this server, kept in the high bits of the job ids it issues.",
							"Give each server of a sharded deployment its own number.",
							&cq_node_id,
							0, 0, CQ_MAX_NODE_ID,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
	DefineCustomStringVariable("claimq.databases",
							   "Databases the claimq reclaimer serves, comma-separated.",
							   NULL,
							   &cq_databases,
							   "postgres",
							   PGC_SIGHUP,
							   0,
							   NULL, NULL, NULL);
	DefineCustomIntVariable("claimq.reclaim_interval",
							"Time between two passes of the claimq reclaimer.",
							NULL,
							&cq_reclaim_interval,
							1000, 10, 3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("claimq.reclaim_batch",
							"Expired claims the reclaimer puts back per transaction.",
							NULL,
							&cq_reclaim_batch,
							10000, 1, 1000000,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("claimq.claim_floors",
							 "Whether claims start at their queue's floor (with the preload).",
							 "Off, every claim starts at the head of its queue's index.",
							 &cq_claim_floors,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("claimq.reclaimer",
							 "Whether the claimq reclaimer runs its passes.",
							 NULL,
							 &cq_reclaimer_enabled,
							 true,
							 PGC_SIGHUP,
							 0,
							 NULL, NULL, NULL);

	/* Every session that loads the module keeps a ledger of its moves. */
	cq_ledger_init();
	cq_shard_init();

	if (!process_shared_preload_libraries_in_progress)
		return;

	/*
	 * The shared-memory tables' sizes.  Each table is safe when full: what
	 * finds no room takes a slower path with the same guarantees.
	 */
	DefineCustomIntVariable("claimq.census_entries",
							"Queues with jobs, over all databases, that the census counts (one more per database).",
							"When it is full, the databases that need more are counted as unknown and metrics() reads the job table.",
							&cq_census_entries,
							16384, 64, 10000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("claimq.flow_slots",
							"Queues with max_in_flight or rate_limit whose limits are kept in shared memory.",
							"When every slot is in use, a claim of another such queue takes turns on its queue's row, as without the preload.",
							&cq_flow_slots,
							1024, 16, 10000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("claimq.counter_entries",
							"Queues, over all databases, with their own counters and latency histograms.",
							"Further queues of a database share its overflow entry.",
							&cq_counter_entries,
							1024, 16, 1000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("claimq.floor_slots",
							"Queues with a claim floor in shared memory.",
							"A queue without one starts its claims at the head of its index.",
							&cq_floor_slots,
							1024, 16, 10000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("claimq.fair_tenants",
							"Tenants of fair queues, over all databases, whose shares are kept in shared memory (0: none).",
							"When it is full, the claims of a fair queue that needs more use the statements and the shares kept in tables.",
							&cq_fair_tenants,
							4096, 0, 1000000,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("claimq");

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = cq_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = cq_shmem_startup;

	cq_register_launcher();
}

static void
cq_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(add_size(add_size(add_size(cq_reclaimer_shmem_size(),
													  cq_counters_shmem_size()),
											 add_size(cq_wakeup_shmem_size(),
													  cq_floor_shmem_size())),
									add_size(add_size(cq_buckets_shmem_size(),
													  cq_census_shmem_size()),
											 cq_fair_shmem_size())));

	/*
	 * The reclaimer's and counters' lock, the census's lock and gate, the
	 * queue-wide limits' lock and gate, the fair shares' lock.
	 */
	RequestNamedLWLockTranche("claimq", 6);
}

static void
cq_shmem_startup(void)
{
	LWLockPadded *locks;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	locks = GetNamedLWLockTranche("claimq");
	cq_reclaimer_shmem_init(&locks[0].lock);
	cq_counters_shmem_init(&locks[0].lock);
	cq_census_shmem_init(&locks[1].lock, &locks[2].lock);
	cq_wakeup_shmem_init();
	cq_floor_shmem_init();
	cq_buckets_shmem_init(&locks[3].lock, &locks[4].lock);
	cq_fair_shmem_init(&locks[5].lock);
	LWLockRelease(AddinShmemInitLock);
	cq_shmem_ready = true;
}
