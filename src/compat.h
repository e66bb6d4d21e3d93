/*-------------------------------------------------------------------------
 *
 * compat.h
 *		Version shims for building claimq on PostgreSQL 14 to 17.
 *
 * Every difference between server versions that the code depends on is
 * papered over here, as small macros or inline functions, so that the rest
 * of the tree is written against one API (that of PostgreSQL 15).
 *
 *-------------------------------------------------------------------------
 */
#ifndef CLAIMQ_COMPAT_H
#define CLAIMQ_COMPAT_H

#include "access/xlog.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/tuplestore.h"

#if PG_VERSION_NUM < 150000
/* PostgreSQL 15 added InitMaterializedSRF(); 14 spells it out by hand. */
#define MAT_SRF_USE_EXPECTED_DESC	0x01
static inline void
InitMaterializedSRF(FunctionCallInfo fcinfo, bits32 flags)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext oldcontext;
	TupleDesc	tupdesc;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		(rsinfo->allowedModes & SFRM_Materialize) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	oldcontext = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	if (flags & MAT_SRF_USE_EXPECTED_DESC)
		tupdesc = CreateTupleDescCopy(rsinfo->expectedDesc);
	else if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = tuplestore_begin_heap(true, false, work_mem);
	rsinfo->setDesc = tupdesc;
	MemoryContextSwitchTo(oldcontext);
}
#endif

#if PG_VERSION_NUM < 150000
#define MarkGUCPrefixReserved(prefix) EmitWarningsOnPlaceholders(prefix)
#endif

/*
 * PostgreSQL 15 added shmem_request_hook; on 14, shared memory is requested
 * straight from _PG_init and the hook variable below is never called.
 */
#if PG_VERSION_NUM < 150000
typedef void (*shmem_request_hook_type) (void);
static shmem_request_hook_type shmem_request_hook = NULL;
#define CQ_SHMEM_REQUEST_IN_INIT 1
#else
#define CQ_SHMEM_REQUEST_IN_INIT 0
#endif

/*
 * This backend's index among the regular backends, 0 .. MaxBackends - 1:
 * PostgreSQL 17 replaced backend ids (counted from 1) by proc numbers.
 */
#if PG_VERSION_NUM >= 170000
#define CQ_MY_BACKEND_INDEX()	((int) MyProcNumber)
#else
#define CQ_MY_BACKEND_INDEX()	((int) MyBackendId - 1)
#endif

/* The timeline WAL is written on: PostgreSQL 15 made it a function. */
#if PG_VERSION_NUM >= 150000
#define CQ_TIMELINE()	GetWALInsertionTimeLine()
#else
#define CQ_TIMELINE()	ThisTimeLineID
#endif

#endif							/* CLAIMQ_COMPAT_H */
