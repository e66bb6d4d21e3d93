/*-------------------------------------------------------------------------
 *
 * lease.c
 *		The write-less layout's lease rows: one row of claimq.lease per call
 *		that sets an expiry, so that the reclaimer finds claimed and running
 *		jobs by expiry without an index of claimq.job on expires_at.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "claimq.h"

/*
 * Add the row (queue_id, expires_at, ids) to claimq.lease, with its index
 * entry, as an INSERT would.
 */
void
cq_lease_note(int32 queue_id, TimestampTz expires_at, const int64 *ids, int n)
{
	Oid			lease_oid;
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;
	Datum	   *elems;

	if (n == 0)
		return;
	lease_oid = get_relname_relid("lease", get_rel_namespace(cq_job_relid()));
	if (!OidIsValid(lease_oid))
		elog(ERROR, "claimq's lease table is missing");
	rel = table_open(lease_oid, RowExclusiveLock);
	estate = CreateExecutorState();
	rri = makeNode(ResultRelInfo);
	InitResultRelInfo(rri, rel, 1, NULL, 0);
	ExecOpenIndices(rri, false);

	elems = palloc(n * sizeof(Datum));
	for (int i = 0; i < n; i++)
		elems[i] = Int64GetDatum(ids[i]);
	slot = table_slot_create(rel, NULL);
	ExecClearTuple(slot);
	slot->tts_values[0] = Int32GetDatum(queue_id);
	slot->tts_values[1] = TimestampTzGetDatum(expires_at);
	slot->tts_values[2] = PointerGetDatum(construct_array(elems, n, INT8OID,
														  sizeof(int64),
														  FLOAT8PASSBYVAL,
														  TYPALIGN_DOUBLE));
	memset(slot->tts_isnull, 0, 3 * sizeof(bool));
	ExecStoreVirtualTuple(slot);
	simple_table_tuple_insert(rel, slot);
#if PG_VERSION_NUM >= 160000
	ExecInsertIndexTuples(rri, slot, estate, false, false, NULL, NIL, false);
#else
	ExecInsertIndexTuples(rri, slot, estate, false, false, NULL, NIL);
#endif
	ExecDropSingleTupleTableSlot(slot);
	ExecCloseIndices(rri);
	FreeExecutorState(estate);
	table_close(rel, NoLock);
}
