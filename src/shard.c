/*-------------------------------------------------------------------------
 *
 * shard.c
 *		A distributed install (claimq.distribute(), on Citus): the call of
 *		a queue runs, on the node that holds the queue, against that
 *		queue's shard tables, as a single server runs against claimq's
 *		tables.
 *
 * claimq.distribute() distributes claimq's queue-keyed tables by the
 * queue's name, colocated, and has Citus delegate each call that names a
 * queue to the node that holds it.  Citus would still plan every statement
 * of the call, and it refuses what claimq's statements do (a volatile
 * function in an UPDATE of a distributed table: the token's nextval, the
 * clock).  So a call that names a queue routes here first
 * (cq_route_to, from the queue look-up and the settles' queue argument;
 * route_to from PL/pgSQL): at its first statement the queue's shards are
 * found (Citus hashes the name with the text type's hash, hashtext),
 * their metadata is locked in ShareLock as Citus's own writes lock it, so
 * that a shard move waits for this transaction and none can begin under
 * it, and their placement must be on this node, read after the lock with
 * a snapshot taken then (else 40001: the queue moved; or, on a node that
 * was not delegated the call, 0A000).  From then on claimq's planner hook
 * plans each statement of a claimq call, C or PL/pgSQL, with the shard
 * (claimq.job_102012) in the place of each of claimq's tables, in the
 * statement already analyzed: plain PostgreSQL on the shard, with every
 * statement's text unchanged.  A row inserted takes its queue column from
 * the route (claimq.routed_queue(), the column's default), so no insert
 * names it either.  The plans a backend keeps are marked, and made again
 * when its route moves to other shards (cq_remark).
 *
 * A call that Citus did not delegate is forwarded (cq_forward: the same
 * call as a statement of constants, which Citus delegates); a settle or
 * job call without its queue is fanned out over its jobs' queues
 * (cq_fan_out).
 *
 * A single server has no such column: cq_distributed() tells the layouts
 * apart once per backend (and again when claimq.job changes), and a call
 * on a single server does nothing more than ask it; the hooks are
 * installed only beside Citus.
 *
 * The route lasts until the next call names a queue, and ends with the
 * transaction, or with a subtransaction's abort, which lets go of the
 * shard locks taken in it.  It calls no other claimq file but common.c's
 * plan and execution helpers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "nodes/params.h"
#include "nodes/plannodes.h"
#include "optimizer/optimizer.h"
#include "optimizer/planner.h"
#include "parser/parse_func.h"
#include "parser/parsetree.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/ruleutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "claimq.h"

/*
 * claimq's tables that distribute() distributes, in two colocation groups:
 * by queue, and the key claims by scope.  A route's statements have the
 * names of its group's tables replaced by its shards.  The first table of
 * each is the one whose shards stand for the group's.
 */
static const char *const cq_queue_tables[] = {
	"queue", "job", "job_after", "job_group", "schedule", "after_mail",
	"job_watcher"
};
static const char *const cq_key_tables[] = {"key_claim"};

#define CQ_QUEUE_TABLES ((int) lengthof(cq_queue_tables))
#define CQ_DISTRIBUTED_TABLES (CQ_QUEUE_TABLES + (int) lengthof(cq_key_tables))

/*
 * Whether claimq.job has the queue column (-1: not known), and if so, the
 * OIDs of the distributed tables, in the order of the two lists above.
 */
static int	cq_layout_distributed = -1;
static Oid	cq_layout_relid = InvalidOid;
static Oid	cq_distributed_relids[CQ_DISTRIBUTED_TABLES];

/*
 * The route: the hash value of its queue's name (and the name, unless the
 * route is a shard's: the reclaimer's), and once resolved, its shards.
 */
static bool cq_route_active = false;
static const char *const *cq_route_tables = cq_queue_tables;
static int	cq_route_ntables = CQ_QUEUE_TABLES;
static char cq_route_name[CQ_QUEUE_NAME_MAX + 1];
static int32 cq_route_hash;
static bool cq_route_resolved = false;
static int64 cq_route_shards[CQ_QUEUE_TABLES];
static Oid	cq_route_relids[CQ_QUEUE_TABLES];	/* claimq's tables */
static Oid	cq_route_shard_relids[CQ_QUEUE_TABLES]; /* and their shards */

/*
 * The plans this backend keeps (SPI's, PL/pgSQL's) that read claimq's
 * tables were made for one route's shards, or (0) for none: the planner
 * hook marks them (a plan made for shards with a second mark), and when a
 * route resolves to other shards, or a statement is planned with no
 * route, the marked plans are made again.  A plan made for shards that
 * is run with no route resolved (a statement of the caller's own after a
 * claimq call, on a worker) is refused at its start (cq_executor_start):
 * it would read one queue's shards in place of the tables.  Plans kept
 * elsewhere than in the plan cache (a SQL function's, for its caller's
 * transaction) see no mark: claimq's functions that read its tables are
 * C and PL/pgSQL, not SQL.
 */
#define CQ_ROUTE_MARK 0x636c6d71
#define CQ_ROUTE_MARK_SHARDS 0x636c6d72
static int64 cq_marked_for = 0;

/*
 * A call of claimq's that Citus delegates to another node is planned as
 * one that writes nothing there ("the worker takes care of locking"), so
 * a transaction that also writes on this node would commit in one phase:
 * the worker's part first, then this node's, and a crash between the two
 * would keep one without the other.  The planner hook marks a delegated
 * call's plan (CQ_DELEGATED_MARK), its start notes it for the
 * transaction, and before this node commits a transaction that both
 * wrote here and ran such a call, claimq has Citus commit it in two
 * phases (cq_shard_xact_callback).  "Wrote here" is a write to the WAL:
 * a transaction that only makes calls, or writes only temporary or
 * unlogged tables, stays in one phase, as it has nothing here that a
 * crash would keep.
 */
#define CQ_DELEGATED_MARK 0x636c6d73
static bool cq_delegated_in_xact = false;

/*
 * Whether this transaction queued a NOTIFY of claimq's (cq_notify):
 * PostgreSQL cannot prepare a transaction that notifies, so on a
 * distributed install, where Citus prepares a worker's part of a
 * transaction that spans nodes, the notification is let go at prepare
 * rather than failing the commit.
 */
static bool cq_notified_in_xact = false;

/*
 * How many calls of claimq's functions are running in this backend
 * (fmgr_hook: each has SET search_path, so each passes the hook): only
 * their statements, and the reclaimer's, are planned against a route's
 * shards; a statement of the caller's own, after a claimq call in its
 * transaction on a worker, reads the tables.
 */
static int	cq_call_depth = 0;

static bool
cq_in_claimq_call(void)
{
	return cq_call_depth > 0 || MyBackendType == B_BG_WORKER;
}

static void cq_remark(int64 shard);

static void
cq_layout_forget(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == cq_layout_relid)
		cq_layout_distributed = -1;
}

/*
 * Whether this install is distributed: claimq.job has the queue column
 * that distribute() adds.  Asked by every queue-scoped call; kept until
 * claimq.job changes.
 */
bool
cq_distributed(void)
{
	static bool callback_registered = false;
	Oid			nsp;

	if (cq_layout_distributed < 0)
	{
		if (!callback_registered)
		{
			CacheRegisterRelcacheCallback(cq_layout_forget, (Datum) 0);
			callback_registered = true;
		}
		/* Asked by the planner hook in any database, claimq's or not. */
		nsp = get_namespace_oid("claimq", true);
		if (!OidIsValid(nsp))
			return false;
		cq_layout_relid = get_relname_relid("job", nsp);
		cq_layout_distributed = OidIsValid(cq_layout_relid) &&
			get_attnum(cq_layout_relid, "queue") != InvalidAttrNumber;
		if (cq_layout_distributed)
		{
			for (int i = 0; i < CQ_DISTRIBUTED_TABLES; i++)
				cq_distributed_relids[i] =
					get_relname_relid(i < CQ_QUEUE_TABLES ? cq_queue_tables[i] :
									  cq_key_tables[i - CQ_QUEUE_TABLES], nsp);
		}
	}
	return cq_layout_distributed > 0;
}

/*
 * This node's Citus group (0 on the coordinator), read once per backend:
 * a node's group never changes.  The caller has connected SPI.
 */
int32
cq_local_group(void)
{
	static int32 group = -1;
	static SPIPlanPtr plan = NULL;
	bool		isnull;

	if (group < 0)
	{
		cq_plan_unrouted(&plan,
						 "SELECT g.groupid FROM pg_catalog.pg_dist_local_group g",
						 0, NULL);
		cq_execute(plan, NULL, NULL, SPI_OK_SELECT);
		if (SPI_processed != 1)
			elog(ERROR, "Citus's pg_dist_local_group has no row");
		group = DatumGetInt32(cq_spi_value(0, 1, &isnull));
	}
	return group;
}

/*
 * Set the route to the shards that hold `key` (hashed as Citus hashes a
 * text distribution value) in the colocation group of `tables`, with the
 * queue `name` for the rows inserted (empty for a scope's).
 */
static void
cq_route_set(const char *const *tables, int ntables, const char *name,
			 const char *key)
{
	cq_route_tables = tables;
	cq_route_ntables = ntables;
	strlcpy(cq_route_name, name, sizeof(cq_route_name));
	cq_route_hash = DatumGetInt32(DirectFunctionCall1Coll(hashtext,
														  DEFAULT_COLLATION_OID,
														  CStringGetTextDatum(key)));
	cq_route_active = true;
	cq_route_resolved = false;
}

/*
 * Route the statements that follow to the shards of queue `name`, on a
 * distributed install; on a single server, nothing.  Needs no SPI: the
 * shards are found at the next statement prepared.
 */
void
cq_route_to(const char *name)
{
	if (!cq_distributed())
		return;
	if (cq_route_active && cq_route_resolved &&
		cq_route_tables == cq_queue_tables &&
		strcmp(cq_route_name, name) == 0)
		return;
	cq_route_set(cq_queue_tables, CQ_QUEUE_TABLES, name, name);
}

/*
 * Route the statements that follow to the key claims' shard of `scope`,
 * as cq_route_to routes to a queue's.
 */
void
cq_route_to_scope(const char *scope)
{
	if (!cq_distributed())
		return;
	cq_route_set(cq_key_tables, lengthof(cq_key_tables), "", scope);
}

/*
 * The shards placed on this node of claimq.queue (keys false) or of
 * claimq.key_claim (keys true), a List of their ids (int8s), for the
 * reclaimer.  The caller has connected SPI.
 */
List *
cq_local_shards(bool keys)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {REGCLASSOID};
	Datum		values[1];
	List	   *shards = NIL;
	bool		isnull;

	cq_plan_unrouted(&plan,
					 "SELECT s.shardid FROM pg_catalog.pg_dist_shard s"
					 "  JOIN pg_catalog.pg_dist_placement p ON p.shardid = s.shardid"
					 " WHERE s.logicalrelid = $1"
					 "   AND p.groupid = (SELECT g.groupid"
					 "                      FROM pg_catalog.pg_dist_local_group g)"
					 " ORDER BY s.shardid",
					 1, argtypes);
	values[0] = ObjectIdGetDatum(get_relname_relid(keys ? "key_claim" : "queue",
												   get_namespace_oid("claimq", false)));
	cq_execute_latest(plan, values, NULL, SPI_OK_SELECT);
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		int64	   *shard = palloc(sizeof(int64));

		*shard = DatumGetInt64(cq_spi_value(row, 1, &isnull));
		shards = lappend(shards, shard);
	}
	return shards;
}

/*
 * Route the statements that follow to the shards colocated with the shard
 * `shard` (of cq_local_shards(keys)), whatever queues or scopes they hold.
 * The caller has connected SPI.
 */
void
cq_route_to_shard(int64 shard, bool keys)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1];
	bool		isnull;

	cq_route_tables = keys ? cq_key_tables : cq_queue_tables;
	cq_route_ntables = keys ? (int) lengthof(cq_key_tables) : CQ_QUEUE_TABLES;
	cq_plan_unrouted(&plan,
					 "SELECT s.shardminvalue::pg_catalog.int4"
					 "  FROM pg_catalog.pg_dist_shard s WHERE s.shardid = $1",
					 1, argtypes);
	values[0] = Int64GetDatum(shard);
	cq_execute_latest(plan, values, NULL, SPI_OK_SELECT);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("shard " INT64_FORMAT " of claimq.queue is gone", shard)));
	cq_route_hash = DatumGetInt32(cq_spi_value(0, 1, &isnull));
	cq_route_name[0] = '\0';
	cq_route_active = true;
	cq_route_resolved = false;
}

/* Whether statements are routed now. */
bool
cq_routed(void)
{
	return cq_route_active;
}

/* The end of a route: at the end of a transaction, or of the reclaimer's turn. */
void
cq_route_end(void)
{
	cq_route_active = false;
	cq_route_name[0] = '\0';
	cq_route_resolved = false;
}

/* The number of columns of relation relid, dropped ones counted. */
static int
cq_relnatts(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	int			natts;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	natts = ((Form_pg_class) GETSTRUCT(tuple))->relnatts;
	ReleaseSysCache(tuple);
	return natts;
}

/*
 * Find the route's shards, lock their metadata and insist that they are
 * placed here.
 */
static bool
cq_route_resolve(bool must_be_here)
{
	static SPIPlanPtr find_plan = NULL;
	static SPIPlanPtr lock_plan = NULL;
	static SPIPlanPtr placed_plan = NULL;
	Oid			argtypes[2] = {INT4OID, OIDARRAYOID};
	Datum		values[2];
	Datum		relids[CQ_QUEUE_TABLES];
	Datum		shards[CQ_QUEUE_TABLES];
	Oid			nsp = get_namespace_oid("claimq", false);
	int32		hash;
	bool		isnull;

	hash = cq_route_hash;
	for (int i = 0; i < cq_route_ntables; i++)
	{
		cq_route_relids[i] = get_relname_relid(cq_route_tables[i], nsp);
		relids[i] = ObjectIdGetDatum(cq_route_relids[i]);
	}

	/* The shards of each table, in the order of cq_queue_tables. */
	cq_plan_unrouted(&find_plan,
					 "SELECT s.shardid"
					 "  FROM pg_catalog.unnest($2) WITH ORDINALITY AS t(relid, n)"
					 "  JOIN pg_catalog.pg_dist_shard s ON s.logicalrelid = t.relid"
					 " WHERE $1 BETWEEN s.shardminvalue::int4 AND s.shardmaxvalue::int4"
					 " ORDER BY t.n",
					 2, argtypes);
	values[0] = Int32GetDatum(hash);
	values[1] = PointerGetDatum(construct_array(relids, cq_route_ntables, OIDOID,
												sizeof(Oid), true, TYPALIGN_INT));
	cq_execute_latest(find_plan, values, NULL, SPI_OK_SELECT);
	if (SPI_processed != (uint64) cq_route_ntables)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("claimq's tables are not distributed alike"),
				 errdetail("Found %d of the %d shards of hash value %d.",
						   (int) SPI_processed, cq_route_ntables, hash)));
	for (int i = 0; i < cq_route_ntables; i++)
	{
		cq_route_shards[i] = DatumGetInt64(cq_spi_value(i, 1, &isnull));
		shards[i] = Int64GetDatum(cq_route_shards[i]);
	}

	/*
	 * A shard move takes the shards' metadata lock in ExclusiveLock before it
	 * copies them, and changes their placement before it lets go: once this
	 * transaction holds it in ShareLock, as Citus's own writes take it, a
	 * placement read from now on stays true until the transaction ends.
	 */
	argtypes[0] = INT8ARRAYOID;
	values[0] = PointerGetDatum(construct_array(shards, cq_route_ntables, INT8OID,
												sizeof(int64), true, TYPALIGN_DOUBLE));
	cq_plan_unrouted(&lock_plan,
					 "SELECT pg_catalog.lock_shard_metadata(5, $1)",
					 1, argtypes);
	cq_execute(lock_plan, values, NULL, SPI_OK_SELECT);
	cq_plan_unrouted(&placed_plan,
					 "SELECT pg_catalog.count(*) = pg_catalog.cardinality($1)"
					 "  FROM pg_catalog.pg_dist_placement p"
					 " WHERE p.shardid = ANY ($1)"
					 "   AND p.groupid = (SELECT g.groupid"
					 "                      FROM pg_catalog.pg_dist_local_group g)",
					 1, argtypes);
	cq_execute_latest(placed_plan, values, NULL, SPI_OK_SELECT);
	if (!DatumGetBool(cq_spi_value(0, 1, &isnull)) && !must_be_here)
		return false;
	if (!DatumGetBool(cq_spi_value(0, 1, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 cq_route_name[0] ?
				 errmsg("queue \"%s\" is not on this node", cq_route_name) :
				 errmsg("shard " INT64_FORMAT " of claimq.queue is not on this node",
						cq_route_shards[0]),
				 errdetail("Its shards moved to another node during the call."),
				 errhint("Retry the transaction.")));

	/*
	 * The planner hook puts each shard in its table's place in a statement
	 * already analyzed, whose columns are the table's by number: a shard has
	 * the table's columns, and the same numbers unless the table has dropped
	 * some.
	 */
	for (int i = 0; i < cq_route_ntables; i++)
	{
		char	   *shard_name = psprintf("%s_" INT64_FORMAT,
										  cq_route_tables[i], cq_route_shards[i]);

		cq_route_shard_relids[i] = get_relname_relid(shard_name, nsp);
		if (!OidIsValid(cq_route_shard_relids[i]))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("shard claimq.%s is not on this node", shard_name),
					 errhint("Retry the transaction.")));
		if (cq_relnatts(cq_route_shard_relids[i]) !=
			cq_relnatts(cq_route_relids[i]))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("claimq.%s and its shard claimq.%s differ in their columns",
							cq_route_tables[i], shard_name),
					 errdetail("A call of a distributed install runs its statements on the shards by the table's column numbers."),
					 errhint("After ALTER EXTENSION claimq UPDATE, run claimq.update_distributed() on the coordinator.")));
	}
	cq_remark(cq_route_shards[0]);
	cq_route_resolved = true;
	return true;
}

/*
 * Make the plans marked by the planner hook again at their next use: they
 * were made for other shards than `shard`'s (0: for no route).
 */
static void
cq_remark(int64 shard)
{
	if (cq_marked_for == shard)
		return;
	CallSyscacheCallbacks(PROCOID, CQ_ROUTE_MARK);
	CallSyscacheCallbacks(PROCOID, CQ_ROUTE_MARK_SHARDS);
	cq_marked_for = shard;
}

/*
 * Before a statement is planned or run (cq_plan calls it on a distributed
 * install): a routed call's first statement resolves the route, so that
 * the planner hook plans it against the route's shards.
 */
void
cq_route_ready(void)
{
	if (cq_routed() && !cq_route_resolved)
		(void) cq_route_resolve(true);
}

/* Calls forwarded by this backend and not yet returned (cq_forward). */
static int	cq_forwarding = 0;

/*
 * Whether the route set just now leads to shards on another node; if not,
 * their locks are taken.
 */
static bool
cq_route_elsewhere(void)
{
	bool		here;

	if (cq_route_resolved)
		return false;
	SPI_connect();
	here = cq_route_resolve(cq_forwarding > 0);
	SPI_finish();
	if (!here)
		cq_route_end();
	return !here;
}

/*
 * Whether a call that names queue `name` is to be forwarded (cq_forward):
 * on a distributed install, when the queue's shards are not on this node
 * (the coordinator, or a worker called directly, or a call that Citus did
 * not delegate: in an expression, say).  On the node that holds them, the
 * route is resolved and stays for the call.  A call forwarded once that
 * still finds the shards elsewhere (they moved, or Citus did not delegate
 * the forwarded call) fails with 40001.
 */
bool
cq_forward_wanted(const char *name)
{
	if (!cq_distributed())
		return false;
	cq_route_to(name);
	return cq_route_elsewhere();
}

/* cq_forward_wanted for the key claims' shard of `scope`. */
bool
cq_forward_wanted_scope(const char *scope)
{
	if (!cq_distributed())
		return false;
	cq_route_to_scope(scope);
	return cq_route_elsewhere();
}

/* cq_forward_wanted for the queue named by argument argno, if given. */
bool
cq_forward_wanted_arg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return false;
	return cq_forward_wanted(cq_queue_name_arg(fcinfo, argno));
}

/*
 * Whether a settle or job call given no queue (argument queue_argno) is to
 * be fanned out: on a distributed install.
 */
static bool
cq_fan_out_wanted(FunctionCallInfo fcinfo, int queue_argno)
{
	return (PG_NARGS() <= queue_argno || PG_ARGISNULL(queue_argno)) &&
		cq_distributed();
}

static Datum cq_fan_out(FunctionCallInfo fcinfo, int queue_argno,
						int timeout_argno, TimestampTz deadline);

/*
 * For a settle or job call whose queue is argument queue_argno: whether
 * another node answers it (a call without its queue fanned out over the
 * jobs' queues, or a call forwarded to its queue's node), and then its
 * result in *result.  A call with a timeout (argument timeout_argno, or
 * -1) that ends at deadline gives each call of a fan-out what is left of
 * it.
 */

bool
cq_answered_elsewhere(FunctionCallInfo fcinfo, int queue_argno,
					  int timeout_argno, TimestampTz deadline, Datum *result)
{
	if (cq_fan_out_wanted(fcinfo, queue_argno))
		*result = cq_fan_out(fcinfo, queue_argno, timeout_argno, deadline);
	else if (cq_forward_wanted_arg(fcinfo, queue_argno))
		*result = cq_forward(fcinfo);
	else
		return false;
	return true;
}

/*
 * Run sql, a call of claimq's that Citus delegates to its queue's node;
 * the node that runs it must hold the queue (cq_forward_wanted).  The
 * caller has connected SPI; the rows are in SPI_tuptable.
 */
static void
cq_execute_forwarded(const char *sql)
{
	cq_forwarding++;
	PG_TRY();
	{
		if (SPI_execute(sql, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "SPI_execute failed: %s", sql);
	}
	PG_FINALLY();
	{
		cq_forwarding--;
	}
	PG_END_TRY();
}

/* The literal of argument argno, limited to the positions of `subset` if it is an array. */
static void
cq_append_arg(StringInfo sql, FunctionCallInfo fcinfo, int argno, Oid type,
			  int *subset, int nsubset, int nids)
{
	Datum		value = PG_GETARG_DATUM(argno);
	Oid			elemtype = get_element_type(type);
	Oid			output;
	bool		varlena;

	if (PG_ARGISNULL(argno))
	{
		appendStringInfo(sql, "NULL::%s", format_type_be_qualified(type));
		return;
	}
	if (OidIsValid(elemtype) && subset != NULL)
	{
		ArrayType  *array = DatumGetArrayTypeP(value);
		int16		elemlen;
		bool		elembyval;
		char		elemalign;
		Datum	   *elems;
		bool	   *nulls;
		int			nelems;
		Datum	   *picked;
		bool	   *pickednulls;
		int			dims[1];
		int			lbs[1] = {1};

		get_typlenbyvalalign(elemtype, &elemlen, &elembyval, &elemalign);
		deconstruct_array(array, elemtype, elemlen, elembyval, elemalign,
						  &elems, &nulls, &nelems);
		if (nelems == nids)
		{
			picked = palloc(sizeof(Datum) * Max(nsubset, 1));
			pickednulls = palloc(sizeof(bool) * Max(nsubset, 1));
			for (int i = 0; i < nsubset; i++)
			{
				picked[i] = elems[subset[i]];
				pickednulls[i] = nulls[subset[i]];
			}
			dims[0] = nsubset;
			value = PointerGetDatum(construct_md_array(picked, pickednulls, 1,
													   dims, lbs, elemtype,
													   elemlen, elembyval,
													   elemalign));
		}
	}
	getTypeOutputInfo(type, &output, &varlena);
	appendStringInfo(sql, "%s::%s",
					 quote_literal_cstr(OidOutputFunctionCall(output, value)),
					 format_type_be_qualified(type));
}

/*
 * Run the call again for the jobs at `subset` of its job ids, naming
 * `queue`, as a statement that Citus delegates to the queue's worker:
 * every argument a constant, the job ids (the first argument, an array or
 * one id) and the other arrays as long as they cut to the subset.  The
 * caller has connected SPI; the rows are in SPI_tuptable.
 */
static void
cq_fan_out_call(FunctionCallInfo fcinfo, Oid *argtypes, int queue_argno,
				const char *queue, int *subset, int nsubset, int nids,
				int timeout_argno, TimestampTz deadline)
{
	Oid			fn = fcinfo->flinfo->fn_oid;
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT * FROM %s(",
					 quote_qualified_identifier("claimq", get_func_name(fn)));
	for (int argno = 0; argno < PG_NARGS(); argno++)
	{
		if (argno > 0)
			appendStringInfoString(&sql, ", ");
		if (argno == queue_argno)
			appendStringInfo(&sql, "%s::pg_catalog.text",
							 quote_literal_cstr(queue));
		else if (argno == timeout_argno)
			appendStringInfo(&sql, "'" INT64_FORMAT " microseconds'::pg_catalog.interval",
							 Max((int64) (deadline - GetCurrentTimestamp()), (int64) 0));
		else
			cq_append_arg(&sql, fcinfo, argno, argtypes[argno], subset,
						  nsubset, nids);
	}
	appendStringInfoChar(&sql, ')');
	cq_execute_forwarded(sql.data);
}

/*
 * A call that names a queue whose shards are on another node
 * (cq_forward_wanted): the same call again, every argument a constant, as
 * a statement that Citus delegates to that node, and its result.  One hop
 * more than a call that Citus delegated itself.
 */
Datum
cq_forward(FunctionCallInfo fcinfo)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		retset = rsinfo != NULL && IsA(rsinfo, ReturnSetInfo);
	Oid		   *argtypes;
	int			nargs;
	Oid			rettype;
	int16		typlen;
	bool		typbyval;
	Datum		result = (Datum) 0;
	bool		isnull = false;

	rettype = get_func_signature(fcinfo->flinfo->fn_oid, &argtypes, &nargs);
	if (retset)
		InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	SPI_connect();
	cq_fan_out_call(fcinfo, argtypes, -1, NULL, NULL, 0, -1, -1, 0);
	if (retset)
	{
		for (uint64 row = 0; row < SPI_processed; row++)
			tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[row]);
	}
	else
	{
		if (SPI_processed != 1)
			elog(ERROR, "a forwarded call returned " UINT64_FORMAT " rows",
				 SPI_processed);
		get_typlenbyval(rettype, &typlen, &typbyval);
		result = cq_spi_value(0, 1, &isnull);
		if (!isnull)
			result = SPI_datumTransfer(result, typbyval, typlen);
	}
	SPI_finish();
	if (retset)
		return (Datum) 0;
	if (isnull)
		PG_RETURN_NULL();
	return result;
}

/*
 * The queue of each of the nids jobs idv (NULL for a job found nowhere),
 * by one look over every worker: Citus plans it (not a kept generic plan,
 * which it cannot distribute with parameters).  The caller has connected
 * SPI.
 */
static char **
cq_queues_of_jobs(Datum *idv, int nids)
{
	Oid			argtypes[1] = {INT8ARRAYOID};
	Datum		values[1];
	char	  **queues = palloc0(sizeof(char *) * nids);
	bool		isnull;

	values[0] = PointerGetDatum(construct_array(idv, nids, INT8OID, sizeof(int64),
												FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	if (SPI_execute_with_args("SELECT j.job_id, j.queue FROM claimq.job j"
							  " WHERE j.job_id OPERATOR(pg_catalog.=) ANY ($1)",
							  1, argtypes, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_with_args failed");
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		int64		id = DatumGetInt64(cq_spi_value(row, 1, &isnull));
		char	   *queue = TextDatumGetCString(cq_spi_value(row, 2, &isnull));

		for (int i = 0; i < nids; i++)
			if (DatumGetInt64(idv[i]) == id)
				queues[i] = queue;
	}
	return queues;
}

/*
 * A settle or job call given no queue, on a distributed install (where it
 * runs on the coordinator: Citus delegates no call whose queue is NULL):
 * one multi-shard look finds each job's queue, then the call runs again
 * once per queue, delegated to that queue's worker, with that queue's
 * jobs (cq_fan_out_call; a wait's timeout, argument timeout_argno, cut to
 * what is left of it until deadline).  A job found nowhere goes with the first queue's
 * call, which finds it missing too; if none is found, every row says
 * missing (the columns job_id and outcome; the scalar forms false).  The
 * rows come back in the order of the job ids, one per id, as each form
 * returns them.  Costs a round trip to every worker for the look, and one
 * to the worker of each queue.  Call after the arguments are judged.
 */
static Datum
cq_fan_out(FunctionCallInfo fcinfo, int queue_argno, int timeout_argno,
		   TimestampTz deadline)
{
	Oid			fn = fcinfo->flinfo->fn_oid;
	Oid		   *argtypes;
	int			nargs;
	bool		retset = fcinfo->resultinfo != NULL &&
	IsA(fcinfo->resultinfo, ReturnSetInfo);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum	   *idv;
	int			nids;
	char	  **queues;			/* per id: its queue, or NULL */
	int		   *group;			/* per id: its call */
	int		   *index;			/* per id: its row in that call */
	char	  **calls = NULL;	/* per call: its queue */
	int			ncalls = 0;
	HeapTuple **rows;
	Datum		scalar = BoolGetDatum(false);
	bool		isnull;

	(void) get_func_signature(fn, &argtypes, &nargs);
	if (argtypes[0] == INT8OID)
	{
		idv = palloc(sizeof(Datum));
		idv[0] = PG_GETARG_DATUM(0);
		nids = 1;
	}
	else
		deconstruct_array(PG_GETARG_ARRAYTYPE_P(0), INT8OID, sizeof(int64),
						  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &idv, NULL, &nids);
	if (retset)
		InitMaterializedSRF(fcinfo, 0);
	if (nids == 0)
		return (Datum) 0;

	SPI_connect();
	queues = cq_queues_of_jobs(idv, nids);

	/* The calls: one per queue, in order of first appearance. */
	group = palloc(sizeof(int) * nids);
	index = palloc(sizeof(int) * nids);
	calls = palloc(sizeof(char *) * nids);
	for (int i = 0; i < nids; i++)
	{
		group[i] = -1;
		if (queues[i] == NULL)
			continue;
		for (int c = 0; c < ncalls; c++)
			if (strcmp(calls[c], queues[i]) == 0)
				group[i] = c;
		if (group[i] < 0)
		{
			calls[ncalls] = queues[i];
			group[i] = ncalls++;
		}
	}
	if (ncalls > 0)
		for (int i = 0; i < nids; i++)
			if (group[i] < 0)
				group[i] = 0;

	rows = palloc0(sizeof(HeapTuple *) * Max(ncalls, 1));
	for (int c = 0; c < ncalls; c++)
	{
		int		   *subset = palloc(sizeof(int) * nids);
		int			nsubset = 0;

		for (int i = 0; i < nids; i++)
			if (group[i] == c)
			{
				index[i] = nsubset;
				subset[nsubset++] = i;
			}
		cq_fan_out_call(fcinfo, argtypes, queue_argno, calls[c], subset,
						nsubset, nids, timeout_argno, deadline);
		if (SPI_processed != (uint64) nsubset)
			elog(ERROR, "claimq.%s() returned " UINT64_FORMAT " rows for %d jobs",
				 get_func_name(fn), SPI_processed, nsubset);
		if (!retset)
			scalar = cq_spi_value(0, 1, &isnull);
		else
		{
			rows[c] = palloc(sizeof(HeapTuple) * nsubset);
			for (int k = 0; k < nsubset; k++)
				rows[c][k] = SPI_copytuple(SPI_tuptable->vals[k]);
		}
	}
	SPI_finish();

	if (!retset)
		PG_RETURN_DATUM(scalar);
	for (int i = 0; i < nids; i++)
	{
		if (ncalls > 0)
			tuplestore_puttuple(rsinfo->setResult, rows[group[i]][index[i]]);
		else
		{
			TupleDesc	desc = rsinfo->setDesc;
			Datum	   *cols = palloc0(sizeof(Datum) * desc->natts);
			bool	   *nulls = palloc(sizeof(bool) * desc->natts);

			for (int a = 0; a < desc->natts; a++)
			{
				const char *name = NameStr(TupleDescAttr(desc, a)->attname);

				nulls[a] = true;
				if (strcmp(name, "job_id") == 0)
				{
					cols[a] = idv[i];
					nulls[a] = false;
				}
				else if (strcmp(name, "outcome") == 0)
				{
					cols[a] = CStringGetTextDatum("missing");
					nulls[a] = false;
				}
			}
			tuplestore_putvalues(rsinfo->setResult, desc, cols, nulls);
		}
	}
	return (Datum) 0;
}

/* Messages a hand-off (cq_hand_off_after) takes at most per batch. */
#define CQ_MAIL_BATCH 100

/* A failure of a hand-off is logged again after this long (ms). */
#define CQ_HAND_OFF_LOG_MS 60000

/* A message of claimq.after_mail (sql/after-elsewhere.sql). */
typedef struct CqMail
{
	char	   *queue;			/* the sender's */
	int64		job_id;
	int64		set_id;
	char	   *to_queue;		/* NULL: a look */
	char	   *state;
	char	   *missed_at;		/* a look's first miss, or NULL */
	bool		expired;		/* missed for two minutes */
	char	   *found;			/* a look's job's queue, or NULL */
} CqMail;

/* A batch of the hand-off, and the message at hand. */
typedef struct CqHandOff
{
	MemoryContext cxt;			/* where the batch is kept */
	int64		shard;
	bool		looks;
	int			nmail;
	CqMail	   *mail;
	int			at;
	int			handed;			/* messages handed on */
} CqHandOff;

/* The last failure of a hand-off that this backend logged, and when. */
static char *cq_hand_off_failure = NULL;
static TimestampTz cq_hand_off_failed_at = 0;

/*
 * A hand-off failed: a WARNING, again only if the error changes or a
 * minute has passed.
 */
static void
cq_hand_off_failed(ErrorData *edata)
{
	TimestampTz now = GetCurrentTimestamp();

	if (cq_hand_off_failure != NULL &&
		strcmp(cq_hand_off_failure, edata->message) == 0 &&
		!TimestampDifferenceExceeds(cq_hand_off_failed_at, now,
									CQ_HAND_OFF_LOG_MS))
		return;
	ereport(WARNING,
			(errmsg("claimq's hand-off of workflow mail failed: %s",
					edata->message),
			 errdetail("It is tried again at each pass; this is logged again if the error changes, or after a minute.")));
	if (cq_hand_off_failure != NULL)
		pfree(cq_hand_off_failure);
	cq_hand_off_failure = MemoryContextStrdup(TopMemoryContext, edata->message);
	cq_hand_off_failed_at = now;
}

/*
 * Run step(h) in a subtransaction, connected to SPI.  Returns false if it
 * failed: then it changed nothing, and its error is logged.
 */
static bool
cq_hand_off_try(void (*step) (CqHandOff *h), CqHandOff *h)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile bool ok = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);
	PG_TRY();
	{
		SPI_connect();
		step(h);
		SPI_finish();
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
		cq_route_end();
		cq_hand_off_failed(edata);
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

/* A copy in the batch's context of a value SPI returned, or NULL. */
static char *
cq_hand_off_keep(CqHandOff *h, char *value)
{
	return value == NULL ? NULL : MemoryContextStrdup(h->cxt, value);
}

/*
 * A call of claimq's about a job and a set that Citus delegates to the
 * node of queue (its first argument), and its result.  In FROM: Citus
 * delegates no call in a transaction of several statements that is a
 * simple expression.
 */
static char *
cq_hand_off_call(CqHandOff *h, const char *fn, const char *queue,
				 int64 job_id, const char *third, int64 set_id)
{
	StringInfoData sql;
	bool		isnull;
	Datum		value;

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT r::pg_catalog.text FROM claimq.%s(%s::pg_catalog.text, "
					 INT64_FORMAT "::pg_catalog.int8, %s::pg_catalog.text, "
					 INT64_FORMAT "::pg_catalog.int8) r",
					 fn, quote_literal_cstr(queue), job_id,
					 quote_literal_cstr(third), set_id);
	cq_execute_forwarded(sql.data);
	value = cq_spi_value(0, 1, &isnull);
	return isnull ? NULL : cq_hand_off_keep(h, TextDatumGetCString(value));
}

/*
 * Write message m again, at the back of its shard's mail (through Citus,
 * whatever route a call left), for the next pass; a look missed now keeps
 * the time of its first miss.
 */
static void
cq_hand_off_again(CqMail *m, bool missed)
{
	StringInfoData sql;

	cq_route_end();
	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "INSERT INTO claimq.after_mail"
					 " (queue, job_id, set_id, to_queue, state, missed_at)"
					 " VALUES (%s, " INT64_FORMAT ", " INT64_FORMAT ", %s, %s, %s)",
					 quote_literal_cstr(m->queue), m->job_id, m->set_id,
					 m->to_queue ? quote_literal_cstr(m->to_queue) : "NULL",
					 m->state ? quote_literal_cstr(m->state) : "NULL",
					 m->missed_at ? quote_literal_cstr(m->missed_at) :
					 missed ? "pg_catalog.clock_timestamp()" : "NULL");
	if (SPI_execute(sql.data, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "SPI_execute failed: %s", sql.data);
}

/*
 * Take a batch from the shard: the final states (h->looks false) or the
 * looks, up to CQ_MAIL_BATCH, oldest first, read and deleted before Citus
 * runs anything in the transaction; for the looks, where each job is, by
 * one look over every worker.
 */
static void
cq_hand_off_take(CqHandOff *h)
{
	StringInfoData take;
	Datum	   *ids;
	char	  **found;

	cq_route_to_shard(h->shard, false);
	(void) cq_route_resolve(true);
	initStringInfo(&take);
	appendStringInfo(&take,
					 "DELETE FROM claimq.after_mail m"
					 " WHERE m.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
					 "       SELECT t.ctid FROM claimq.after_mail t"
					 "        WHERE t.to_queue IS %s NULL ORDER BY t.written_at"
					 "        LIMIT %d FOR UPDATE SKIP LOCKED))"
					 " RETURNING m.queue, m.job_id, m.set_id, m.to_queue, m.state,"
					 "       m.missed_at, m.missed_at OPERATOR(pg_catalog.<)"
					 "         (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-)"
					 "          '2 minutes'::pg_catalog.interval)",
					 h->looks ? "" : "NOT", CQ_MAIL_BATCH);
	if (SPI_execute(take.data, false, 0) != SPI_OK_DELETE_RETURNING)
		elog(ERROR, "SPI_execute failed: %s", take.data);
	h->nmail = (int) SPI_processed;
	h->mail = MemoryContextAllocZero(h->cxt, sizeof(CqMail) * Max(h->nmail, 1));
	ids = palloc(sizeof(Datum) * Max(h->nmail, 1));
	for (int i = 0; i < h->nmail; i++)
	{
		HeapTuple	row = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		CqMail	   *m = &h->mail[i];
		bool		isnull;

		m->queue = cq_hand_off_keep(h, SPI_getvalue(row, desc, 1));
		m->job_id = DatumGetInt64(SPI_getbinval(row, desc, 2, &isnull));
		m->set_id = DatumGetInt64(SPI_getbinval(row, desc, 3, &isnull));
		m->to_queue = cq_hand_off_keep(h, SPI_getvalue(row, desc, 4));
		m->state = cq_hand_off_keep(h, SPI_getvalue(row, desc, 5));
		m->missed_at = cq_hand_off_keep(h, SPI_getvalue(row, desc, 6));
		m->expired = DatumGetBool(SPI_getbinval(row, desc, 7, &isnull)) && !isnull;
		ids[i] = Int64GetDatum(m->job_id);
	}
	cq_route_end();
	if (!h->looks || h->nmail == 0)
		return;
	found = cq_queues_of_jobs(ids, h->nmail);
	for (int i = 0; i < h->nmail; i++)
		h->mail[i].found = cq_hand_off_keep(h, found[i]);
}

/*
 * Hand on the message at hand (h->at): a final state to its set's node;
 * a look's watch to its job's node, and what it found to its set's node.
 */
static void
cq_hand_off_one(CqHandOff *h)
{
	CqMail	   *m = &h->mail[h->at];
	const char *hearer = m->to_queue;
	char	   *heard = m->state;

	if (m->to_queue == NULL)
	{
		hearer = m->queue;
		heard = NULL;
		if (m->found != NULL)
			heard = cq_hand_off_call(h, "watch_after", m->found, m->job_id,
									 m->queue, m->set_id);
		else if (m->expired)
		{
			ereport(WARNING,
					(errmsg("job " INT64_FORMAT ", which jobs of queue \"%s\" run after, is not found on any node",
							m->job_id, m->queue),
					 errdetail("It counts as a job removed unfinished.")));
			heard = "cancelled";
		}
		if (m->found == NULL ? !m->expired :
			heard != NULL && strcmp(heard, "busy") == 0)
		{
			/*
			 * Its enqueue may not have reached every node yet, or another
			 * transaction holds it: looked for again at the next pass.
			 */
			cq_hand_off_again(m, m->found == NULL);
			return;
		}
		if (heard != NULL && strcmp(heard, "missing") == 0)
			heard = "cancelled";	/* gone since the look: removed */
	}
	if (heard != NULL)
		(void) cq_hand_off_call(h, "hear_after", hearer, m->job_id, heard,
								m->set_id);
}

/*
 * A batch: taken, then each message handed on in a subtransaction of its
 * own; one that fails (its node does not answer, a lock wait that times
 * out) is written again at the back of the mail, so that it holds up
 * none of the others.
 */
static void
cq_hand_off_batch(CqHandOff *h)
{
	cq_hand_off_take(h);
	for (h->at = 0; h->at < h->nmail; h->at++)
	{
		if (cq_hand_off_try(cq_hand_off_one, h))
			h->handed++;
		else
			cq_hand_off_again(&h->mail[h->at], false);
	}
}

/*
 * The reclaimer's hand-off of workflows across shards
 * (sql/after-elsewhere.sql) for the shard of claimq.queue it is routed to:
 * a batch of the final states, then one of the looks, each handed to the
 * node of the queue it concerns by calls that Citus delegates there, and
 * committed with the step's transaction, which Citus commits on every node
 * it wrote to at once.  A batch runs in a subtransaction: if it fails (the
 * look over every worker while one is down), it changes nothing, is
 * logged, and the reclaimer's pass goes on.  Returns how many messages it
 * handed on (a look tried again counts); on a single server, 0.  The
 * caller has connected SPI.
 */
int64
cq_hand_off_after(bool *more)
{
	int64		n = 0;

	*more = false;
	if (!cq_distributed())
		return 0;
	(void) cq_route_resolve(true);
	for (int looks = 0; looks <= 1; looks++)
	{
		CqHandOff	h = {0};

		h.cxt = CurrentMemoryContext;
		h.shard = cq_route_shards[0];
		h.looks = looks;
		if (cq_hand_off_try(cq_hand_off_batch, &h))
		{
			n += h.handed;
			*more = *more || (h.nmail == CQ_MAIL_BATCH && h.handed > 0);
		}
	}
	return n;
}

/*
 * Citus delegates a call of a distributed function by the constant it is
 * given for the distribution argument, and a NULL there (given, or the
 * default of a settle's queue) makes it hash a null pointer: the backend
 * crashes (Citus 13.2.2 and 14.0.1).  claimq's planner hook runs before
 * Citus's (claimq comes after citus in shared_preload_libraries): in a call
 * of one of claimq's functions whose queue (or scope) is NULL (a constant, or a
 * value bound to a parameter), it puts a call of claimq.no_queue() in its
 * place: NULL too, but volatile, so that neither the planner, which runs
 * before Citus looks, folds it into a constant nor Citus delegates the
 * call, so the call is not delegated and runs here, where claimq
 * judges the NULL.  Installed only beside Citus.
 */
static planner_hook_type cq_prev_planner = NULL;

static FuncExpr *
cq_call_of(Query *parse)
{
	if (parse->commandType != CMD_SELECT || parse->hasSubLinks)
		return NULL;
	if (list_length(parse->targetList) == 1 &&
		IsA(((TargetEntry *) linitial(parse->targetList))->expr, FuncExpr))
		return (FuncExpr *) ((TargetEntry *) linitial(parse->targetList))->expr;
	if (list_length(parse->rtable) == 1)
	{
		RangeTblEntry *rte = linitial(parse->rtable);

		if (rte->rtekind == RTE_FUNCTION && list_length(rte->functions) == 1)
		{
			RangeTblFunction *rtf = linitial(rte->functions);

			if (IsA(rtf->funcexpr, FuncExpr))
				return (FuncExpr *) rtf->funcexpr;
		}
	}
	return NULL;
}

/* Whether arg is NULL when the statement is planned: a constant or a value bound. */
static bool
cq_null_arg(Node *arg, ParamListInfo bound_params)
{
	if (IsA(arg, Const))
		return ((Const *) arg)->constisnull;
	if (IsA(arg, Param) && ((Param *) arg)->paramkind == PARAM_EXTERN &&
		bound_params != NULL)
	{
		Param	   *param = (Param *) arg;
		ParamExternData fetched;
		ParamExternData *value;

		if (param->paramid < 1 || param->paramid > bound_params->numParams)
			return false;
		if (bound_params->paramFetch != NULL)
			value = bound_params->paramFetch(bound_params, param->paramid,
											 false, &fetched);
		else
			value = &bound_params->params[param->paramid - 1];
		return value->isnull;
	}
	return false;
}

static void
cq_shield_null_queue(FuncExpr *call, ParamListInfo bound_params)
{
	HeapTuple	proc;
	Oid		   *types;
	char	  **names;
	char	   *modes;
	int			nargs;
	int			queue_arg = -1;
	List	   *args;
	Node	   *arg;

	if (get_func_namespace(call->funcid) != get_namespace_oid("claimq", true))
		return;
	if (!cq_distributed())
		return;
	proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(call->funcid));
	if (!HeapTupleIsValid(proc))
		return;
	nargs = get_func_arg_info(proc, &types, &names, &modes);
	for (int i = 0; names != NULL && i < nargs; i++)
		if (names[i] != NULL &&
			(strcmp(names[i], "queue") == 0 || strcmp(names[i], "scope") == 0) &&
			(modes == NULL || modes[i] == PROARGMODE_IN))
			queue_arg = i;
	if (queue_arg >= 0)
	{
		args = expand_function_arguments(call->args, false,
										 call->funcresulttype, proc);
		arg = list_nth(args, queue_arg);
		if (cq_null_arg(arg, bound_params) && exprType(arg) == TEXTOID)
		{
			Oid			no_queue = LookupFuncName(list_make2(makeString("claimq"),
															 makeString("no_queue")),
												  0, NULL, true);

			if (OidIsValid(no_queue))
			{
				list_nth_cell(args, queue_arg)->ptr_value =
					makeFuncExpr(no_queue, TEXTOID, NIL, InvalidOid,
								 DEFAULT_COLLATION_OID, COERCE_EXPLICIT_CALL);
				call->args = args;
			}
		}
	}
	ReleaseSysCache(proc);
}

/*
 * A routed call's statements run against its shards: whether planned
 * from claimq's C (cq_plan) or from its PL/pgSQL functions, a statement
 * that names claimq's tables of the route's colocation group is planned
 * with each shard in its table's place (the shard has the table's columns
 * and its constraints and indexes, named with the shard's id appended), so
 * that Citus sees no distributed table and PostgreSQL plans it as on a
 * single server.  An ON CONFLICT's target gains the queue column, which
 * the distributed layout's unique indexes end with.
 */
static void
cq_swap_conflict(Query *query)
{
	OnConflictExpr *conflict = query->onConflict;
	RangeTblEntry *target;

	if (conflict == NULL || query->resultRelation == 0)
		return;
	target = rt_fetch(query->resultRelation, query->rtable);
	for (int i = 0; i < cq_route_ntables; i++)
	{
		if (target->relid != cq_route_relids[i])
			continue;
		if (OidIsValid(conflict->constraint))
		{
			char	   *name = get_constraint_name(conflict->constraint);

			conflict->constraint =
				get_relation_constraint_oid(cq_route_shard_relids[i],
											psprintf("%s_" INT64_FORMAT, name,
													 cq_route_shards[i]),
											false);
		}
		else if (conflict->arbiterElems != NIL &&
				 cq_route_tables == cq_queue_tables)
		{
			AttrNumber	attnum = get_attnum(target->relid, "queue");
			InferenceElem *elem = makeNode(InferenceElem);

			elem->expr = (Node *) makeVar(query->resultRelation, attnum,
										  TEXTOID, -1, DEFAULT_COLLATION_OID, 0);
			elem->infercollid = InvalidOid;
			elem->inferopclass = InvalidOid;
			conflict->arbiterElems = lappend(conflict->arbiterElems, elem);
		}
	}
}

typedef struct CqSwapContext
{
	bool		swap;			/* put the shards in (else only look) */
	bool		found;			/* names one of the route's tables */
} CqSwapContext;

static bool
cq_swap_walker(Node *node, CqSwapContext *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, RangeTblEntry))
	{
		RangeTblEntry *rte = (RangeTblEntry *) node;

		if (rte->rtekind != RTE_RELATION)
			return false;
		if (!context->swap)
		{
			/* With no route: whether it names any of the distributed tables. */
			for (int i = 0; i < CQ_DISTRIBUTED_TABLES; i++)
				if (rte->relid == cq_distributed_relids[i])
					context->found = true;
			return false;
		}
		for (int i = 0; i < cq_route_ntables; i++)
			if (rte->relid == cq_route_relids[i])
			{
				context->found = true;
				rte->relid = cq_route_shard_relids[i];
			}
		return false;
	}
	if (IsA(node, Query))
	{
		Query	   *query = (Query *) node;

		if (context->swap)
		{
#if PG_VERSION_NUM >= 160000
			ListCell   *lc;

			foreach(lc, query->rteperminfos)
			{
				RTEPermissionInfo *perm = lfirst(lc);

				for (int i = 0; i < cq_route_ntables; i++)
					if (perm->relid == cq_route_relids[i])
						perm->relid = cq_route_shard_relids[i];
			}
#endif
			cq_swap_conflict(query);
		}
		return query_tree_walker(query, cq_swap_walker, context,
								 QTW_EXAMINE_RTES_BEFORE);
	}
	return expression_tree_walker(node, cq_swap_walker, context);
}

static PlannedStmt *
cq_planner(Query *parse, const char *query_string, int cursor_options,
		   ParamListInfo bound_params)
{
	FuncExpr   *call = cq_call_of(parse);
	CqSwapContext context = {false, false};
	PlannedStmt *result;

	if (call != NULL)
		cq_shield_null_queue(call, bound_params);
	if (cq_distributed())
	{
		context.swap = cq_route_resolved && cq_in_claimq_call();
		(void) cq_swap_walker((Node *) parse, &context);
		if (context.found && !context.swap)
			cq_remark(0);
	}
	if (cq_prev_planner)
		result = cq_prev_planner(parse, query_string, cursor_options,
								 bound_params);
	else
		result = standard_planner(parse, query_string, cursor_options,
								  bound_params);
	if (context.found)
	{
		PlanInvalItem *mark = makeNode(PlanInvalItem);

		mark->cacheId = PROCOID;
		mark->hashValue = context.swap ? CQ_ROUTE_MARK_SHARDS : CQ_ROUTE_MARK;
		result->invalItems = lappend(result->invalItems, mark);
	}
	if (call != NULL && IsA(result->planTree, CustomScan) &&
		get_func_namespace(call->funcid) == get_namespace_oid("claimq", true))
	{
		PlanInvalItem *mark = makeNode(PlanInvalItem);

		mark->cacheId = PROCOID;
		mark->hashValue = CQ_DELEGATED_MARK;
		result->invalItems = lappend(result->invalItems, mark);
	}
	return result;
}

static ExecutorStart_hook_type cq_prev_executor_start = NULL;
static fmgr_hook_type cq_prev_fmgr_hook = NULL;

static void
cq_fmgr_hook(FmgrHookEventType event, FmgrInfo *flinfo, Datum *arg)
{
	if (get_func_namespace(flinfo->fn_oid) == get_namespace_oid("claimq", true))
	{
		if (event == FHET_START)
			cq_call_depth++;
		else if (cq_call_depth > 0)
			cq_call_depth--;
	}
	if (cq_prev_fmgr_hook)
		cq_prev_fmgr_hook(event, flinfo, arg);
}

static void
cq_executor_start(QueryDesc *query, int eflags)
{
	ListCell   *lc;

	foreach(lc, query->plannedstmt->invalItems)
	{
		PlanInvalItem *item = lfirst(lc);

		if (item->cacheId == PROCOID && item->hashValue == CQ_DELEGATED_MARK)
			cq_delegated_in_xact = true;
	}
	if ((!cq_route_resolved || !cq_in_claimq_call()) && cq_marked_for != 0)
	{
		foreach(lc, query->plannedstmt->invalItems)
		{
			PlanInvalItem *item = lfirst(lc);

			if (item->cacheId == PROCOID && item->hashValue == CQ_ROUTE_MARK_SHARDS)
			{
				cq_remark(0);
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("a statement planned for a queue's shards ran outside the claimq call that routed it"),
						 errdetail("On a distributed install a statement that names claimq's tables, run on a worker after a claimq call in the same session, was planned against that call's queue's shards."),
						 errhint("Run it again: it is planned against the tables now.")));
			}
		}
	}
	if (cq_prev_executor_start)
		cq_prev_executor_start(query, eflags);
	else
		standard_ExecutorStart(query, eflags);
}

/*
 * NOTIFY claimq, queue for an enqueue into a queue created with notify,
 * noted for cq_shard_xact_callback.
 */
void
cq_notify(const char *queue_name)
{
	Async_Notify("claimq", queue_name);
	cq_notified_in_xact = true;
}

/*
 * At the end of a transaction on a node beside Citus: two phases for a
 * transaction that wrote here and ran a delegated call (CQ_DELEGATED_MARK),
 * and a prepare that is not failed by claimq's notifications.
 */
static void
cq_shard_xact_callback(XactEvent event, void *arg)
{
	static void (*use_2pc) (void) = NULL;

	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (cq_delegated_in_xact && XactLastRecEnd != InvalidXLogRecPtr &&
				TransactionIdIsValid(GetTopTransactionIdIfAny()))
			{
				if (use_2pc == NULL)
					use_2pc = (void (*) (void))
						load_external_function("citus",
											   "Use2PCForCoordinatedTransaction",
											   true, NULL);
				use_2pc();
			}
			break;
		case XACT_EVENT_PRE_PREPARE:
			if (cq_notified_in_xact && cq_distributed())
				AtAbort_Notify();
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			cq_delegated_in_xact = false;
			cq_notified_in_xact = false;
			break;
		default:
			break;
	}
}

/* At load: the hook, if Citus is preloaded before claimq. */
void
cq_shard_init(void)
{
	if (!process_shared_preload_libraries_in_progress ||
		shared_preload_libraries_string == NULL ||
		strstr(shared_preload_libraries_string, "citus") == NULL)
		return;
	cq_prev_planner = planner_hook;
	planner_hook = cq_planner;
	cq_prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = cq_executor_start;
	cq_prev_fmgr_hook = fmgr_hook;
	fmgr_hook = cq_fmgr_hook;
	RegisterXactCallback(cq_shard_xact_callback, NULL);
}

/*
 * node_epoch(epoch integer) returns integer: the first token epoch from
 * `epoch` up that this node may take.  On a distributed install a node
 * takes only the epochs congruent to its Citus group modulo
 * CQ_EPOCH_NODES, so that no two nodes hand out tokens of one epoch: a
 * queue whose shards move to another node keeps tokens that never repeat
 * (each node's claimq.token_seq repeats the other's values).  In no duty.
 */
#define CQ_EPOCH_NODES 128

PG_FUNCTION_INFO_V1(claimq_node_epoch);

Datum
claimq_node_epoch(PG_FUNCTION_ARGS)
{
	int32		epoch = PG_GETARG_INT32(0);
	int32		group;

	if (!cq_distributed())
		PG_RETURN_INT32(epoch);
	SPI_connect();
	group = cq_local_group();
	SPI_finish();
	PG_RETURN_INT32(epoch + ((group - epoch % CQ_EPOCH_NODES) + CQ_EPOCH_NODES) %
					CQ_EPOCH_NODES);
}

/*
 * node_role() returns text: single (not distributed), coordinator or
 * worker.  In no duty.
 */
PG_FUNCTION_INFO_V1(claimq_node_role);

Datum
claimq_node_role(PG_FUNCTION_ARGS)
{
	int32		group;

	if (!cq_distributed())
		PG_RETURN_TEXT_P(cstring_to_text("single"));
	SPI_connect();
	group = cq_local_group();
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(group == 0 ? "coordinator" : "worker"));
}

/*
 * node_queue_stats() returns setof claimq.queue_stats: the view's rows for
 * the queues this node holds.  On a distributed install, the view read
 * once per queue shard placed here, routed as a call's statements are
 * (where the view itself would be Citus's query over every worker); on a
 * single server, the view.  In no duty.
 */
PG_FUNCTION_INFO_V1(claimq_node_queue_stats);

Datum
claimq_node_queue_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	List	   *shards;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	shards = cq_distributed() ? cq_local_shards(false) : list_make1(NULL);
	foreach(lc, shards)
	{
		if (lfirst(lc) != NULL)
		{
			cq_route_to_shard(*(int64 *) lfirst(lc), false);
			(void) cq_route_resolve(true);
		}
		if (SPI_execute("SELECT * FROM claimq.queue_stats", true, 0) != SPI_OK_SELECT)
			elog(ERROR, "SPI_execute failed on claimq.queue_stats");
		for (uint64 row = 0; row < SPI_processed; row++)
			tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[row]);
	}
	cq_route_end();
	SPI_finish();
	return (Datum) 0;
}

/*
 * no_queue() returns text: NULL, for the planner hook above.  In no duty.
 */
PG_FUNCTION_INFO_V1(claimq_no_queue);

Datum
claimq_no_queue(PG_FUNCTION_ARGS)
{
	PG_RETURN_NULL();
}

/*
 * routed_queue() returns text: the queue the statements are routed to,
 * the default of the queue column of a distributed install's tables, so
 * that no insert names it.  Raises 0A000 outside a routed call.
 */
PG_FUNCTION_INFO_V1(claimq_routed_queue);

Datum
claimq_routed_queue(PG_FUNCTION_ARGS)
{
	if (!cq_routed() || cq_route_name[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("claimq's tables of a distributed install are written only by claimq's calls that name a queue")));
	PG_RETURN_TEXT_P(cstring_to_text(cq_route_name));
}

/*
 * route_to(queue text) returns void: the statements of the PL/pgSQL call
 * that calls it first (a call of one queue that Citus delegated) run
 * against that queue's shards, as cq_route_to routes claimq's C calls.
 * On a single server, or given NULL, nothing.  Raises 0A000 on a node
 * that does not hold the queue: such a call runs only as a statement of
 * its own, which Citus delegates.  In no duty.
 */
PG_FUNCTION_INFO_V1(claimq_route_to);

Datum
claimq_route_to(PG_FUNCTION_ARGS)
{
	char	   *name;

	if (PG_ARGISNULL(0) || !cq_distributed())
		PG_RETURN_VOID();
	name = cq_queue_name_arg(fcinfo, 0);
	cq_route_to(name);
	if (cq_route_elsewhere())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("queue \"%s\" is on another node", name),
				 errhint("On a distributed install, call it as a statement of its own, with the queue a constant or a parameter: Citus runs that on the queue's node.")));
	PG_RETURN_VOID();
}

/*
 * routed_shard() returns bigint: the shard of claimq.queue that the
 * statements are routed to, the default of claimq.job_finish's shard on a
 * distributed install.  Raises 0A000 outside a routed call.
 */
PG_FUNCTION_INFO_V1(claimq_routed_shard);

Datum
claimq_routed_shard(PG_FUNCTION_ARGS)
{
	if (!cq_route_resolved || cq_route_tables != cq_queue_tables)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("claimq's jobs of a distributed install finish only in claimq's calls that name a queue")));
	PG_RETURN_INT64(cq_route_shards[0]);
}

/*
 * route_to_shard(shard bigint) returns void: route the statements that
 * follow to the shards colocated with the shard of claimq.queue `shard`,
 * placed on this node.  In no duty.
 */
PG_FUNCTION_INFO_V1(claimq_route_to_shard);

Datum
claimq_route_to_shard(PG_FUNCTION_ARGS)
{
	SPI_connect();
	cq_route_to_shard(PG_GETARG_INT64(0), false);
	(void) cq_route_resolve(true);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * at_schedule(queue text, schedule text, drop_it boolean, new_queue text,
 * cron text, payload jsonb, time_zone text, priority integer, missed text,
 * enabled boolean, headers jsonb) returns void: on a distributed install, alter_schedule
 * (or, drop_it, drop_schedule) of schedule `schedule` of queue `queue`,
 * run on the queue's node with its statements routed to the queue's
 * shards.  Forwarded there from the coordinator (alter_schedule and
 * drop_schedule call it there: Citus delegates no call of PL/pgSQL's
 * own).  In no duty.
 */
PG_FUNCTION_INFO_V1(claimq_at_schedule);

Datum
claimq_at_schedule(PG_FUNCTION_ARGS)
{
	Oid			argtypes[9] = {TEXTOID, TEXTOID, TEXTOID, JSONBOID, TEXTOID,
	INT4OID, TEXTOID, BOOLOID, JSONBOID};
	Datum		values[9];
	char		nulls[9];

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		elog(ERROR, "claimq.at_schedule() needs its queue, schedule and drop_it");
	if (cq_forward_wanted_arg(fcinfo, 0))
		return cq_forward(fcinfo);
	for (int i = 0; i < 9; i++)
	{
		int			argno = i == 0 ? 1 : i + 2;

		values[i] = PG_ARGISNULL(argno) ? (Datum) 0 : PG_GETARG_DATUM(argno);
		nulls[i] = PG_ARGISNULL(argno) ? 'n' : ' ';
	}
	SPI_connect();
	if (PG_GETARG_BOOL(2))
	{
		if (SPI_execute_with_args("SELECT claimq.drop_schedule($1)", 1, argtypes,
								  values, nulls, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "SPI_execute_with_args failed: claimq.drop_schedule()");
	}
	else if (SPI_execute_with_args("SELECT claimq.alter_schedule($1, $2, $3, $4, $5, $6, $7, $8, $9)",
								   9, argtypes, values, nulls, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_with_args failed: claimq.alter_schedule()");
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * reclaim() given no queue, on a distributed install: reclaim() of each
 * queue in turn, in name order, as a statement that Citus delegates to
 * the queue's node, with what is left of max_jobs, until it is spent; the
 * rows of the queues that had expired claims.  One look over every
 * worker for the queues, then a round trip per queue.
 */
Datum
cq_reclaim_every_queue(FunctionCallInfo fcinfo, int32 max_jobs)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	List	   *names = NIL;
	ListCell   *lc;
	int64		left = max_jobs;
	bool		isnull;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	if (SPI_execute("SELECT q.name FROM claimq.queue q ORDER BY q.name COLLATE \"C\"",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute failed on claimq.queue");
	for (uint64 row = 0; row < SPI_processed; row++)
		names = lappend(names, TextDatumGetCString(cq_spi_value(row, 1, &isnull)));
	foreach(lc, names)
	{
		char	   *sql;

		if (left <= 0)
			break;
		sql = psprintf("SELECT * FROM claimq.reclaim(%s::pg_catalog.text, %d)",
					   quote_literal_cstr(lfirst(lc)), (int) left);
		cq_execute_forwarded(sql);
		for (uint64 row = 0; row < SPI_processed; row++)
		{
			int64		n = 0;

			for (int col = 2; col <= 4; col++)
				n += DatumGetInt64(cq_spi_value(row, col, &isnull));
			if (n > 0)
				tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[row]);
			left -= n;
		}
	}
	SPI_finish();
	return (Datum) 0;
}

/*
 * dependencies_everywhere(job_ids bigint[], queue text) returns the rows
 * of claimq.dependencies: on a distributed install, dependencies() given
 * no queue, or not delegated to the queue's node.  One look over every
 * worker finds each job's queue, then dependencies() of each listed job
 * that exists (in `queue`, if given: a job of another queue is as one
 * that does not exist, as on the queue's node) runs, delegated to its
 * queue's node, in the order of the list (one round trip per job).  In no
 * duty.
 */
PG_FUNCTION_INFO_V1(claimq_dependencies_everywhere);

Datum
claimq_dependencies_everywhere(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *ids = cq_job_ids_arg(fcinfo, 0);
	char	   *only = PG_ARGISNULL(1) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(1));
	Datum	   *idv;
	int			nids;
	char	  **queues;

	InitMaterializedSRF(fcinfo, 0);
	deconstruct_array(ids, INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
					  TYPALIGN_DOUBLE, &idv, NULL, &nids);
	if (nids == 0)
		return (Datum) 0;
	SPI_connect();
	queues = cq_queues_of_jobs(idv, nids);
	for (int i = 0; i < nids; i++)
	{
		if (queues[i] == NULL || (only != NULL && strcmp(queues[i], only) != 0))
			continue;
		cq_execute_forwarded(psprintf("SELECT * FROM claimq.dependencies(ARRAY[" INT64_FORMAT "]::pg_catalog.int8[], %s::pg_catalog.text)",
									  DatumGetInt64(idv[i]),
									  quote_literal_cstr(queues[i])));
		for (uint64 row = 0; row < SPI_processed; row++)
			tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[row]);
	}
	SPI_finish();
	return (Datum) 0;
}
