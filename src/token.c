/*-------------------------------------------------------------------------
 *
 * token.c
 *		Fencing tokens: what makes a token, and why none is ever handed out
 *		twice, whatever became of the claim that handed it out.
 *
 * A token is the epoch of the server lifetime that handed it out (bits 48
 * to 62) plus a value of claimq.token_seq, which stays below 2^48.
 * claim() draws one value per job, claim_keys() one per call.
 *
 * Within one lifetime the sequence hands out no value twice.  Across
 * lifetimes it can go back: a crash loses the WAL not yet flushed, and with
 * it the sequence's advance; a promoted standby may not have received the
 * old primary's last records; a restore starts from the dump's value.  So
 * every lifetime takes an epoch of its own, one above every epoch that
 * claimq.epoch registers, the same register in both editions
 * (claimq.lifetime_epoch(), sql/claimq.sql section 11, is the rule).
 *
 * The portable edition hands out no token of an epoch until a transaction
 * that committed synchronously registered it.  This edition need not wait:
 * before a token leaves the server, the WAL record that logged its sequence
 * value is flushed (cq_tokens_durable), so after a crash the sequence goes
 * on past it.  Should the claim that registered the epoch be lost with the
 * crash, the next lifetime takes the same epoch again, but its tokens are
 * still greater than every one handed out before.  The flush is one per
 * cache-full of sequence values in each backend (the sequence logs that
 * far ahead), not one per claim; with synchronous commit it has usually
 * happened already.
 *
 * A backend keeps its lifetime's epoch once a committed transaction
 * registered it: no backend outlives its lifetime (a crash-restart or a
 * restart ends them all, and no backend of a standby draws tokens before
 * its promotion).  What it keeps is dropped when claimq.lifetime is, with
 * the extension or in a move between editions.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "executor/spi.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"

#include "claimq.h"

/* This lifetime's epoch, once durable, and the marker it was read from. */
static bool cq_epoch_known = false;
static int64 cq_epoch_base = 0;
static Oid	cq_epoch_marker = InvalidOid;

static void
cq_epoch_forget(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == cq_epoch_marker)
		cq_epoch_known = false;
}

/*
 * What to add to a value of claimq.token_seq to make a token: this
 * lifetime's epoch, registered by claimq.lifetime_epoch() if this is the
 * lifetime's first look.  Call it inside SPI, before drawing.
 */
int64
cq_token_epoch(void)
{
	static SPIPlanPtr plan = NULL;
	static bool callback_registered = false;
	bool		isnull;
	int64		base;

	if (cq_epoch_known)
		return cq_epoch_base;

	cq_plan(&plan, "SELECT l.epoch, l.durable FROM claimq.lifetime_epoch() l",
			0, NULL);
	cq_execute(plan, NULL, NULL, SPI_OK_SELECT);
	if (SPI_processed != 1)
		elog(ERROR, "claimq.lifetime_epoch() returned %llu rows",
			 (unsigned long long) SPI_processed);
	base = (int64) DatumGetInt32(cq_spi_value(0, 1, &isnull)) << CQ_TOKEN_EPOCH_BITS;
	if (DatumGetBool(cq_spi_value(0, 2, &isnull)))
	{
		if (!callback_registered)
		{
			CacheRegisterRelcacheCallback(cq_epoch_forget, (Datum) 0);
			callback_registered = true;
		}
		cq_epoch_marker = get_relname_relid("lifetime",
											get_namespace_oid("claimq", false));
		cq_epoch_base = base;
		cq_epoch_known = OidIsValid(cq_epoch_marker);
	}
	return base;
}

/*
 * Make sure that no value this transaction drew from claimq.token_seq can
 * be drawn again after a crash, whatever synchronous_commit is: flush WAL
 * up to the last record that logged the sequence ahead.  Call it after
 * drawing and before the tokens are returned.
 */
void
cq_tokens_durable(void)
{
	Oid			seqoid;
	Relation	seqrel;
	Buffer		buf;
	XLogRecPtr	lsn;

	seqoid = get_relname_relid("token_seq", get_namespace_oid("claimq", false));
	if (!OidIsValid(seqoid))
		elog(ERROR, "sequence claimq.token_seq does not exist");

	/* The caller's nextval() holds the lock already. */
	seqrel = relation_open(seqoid, AccessShareLock);
	buf = ReadBuffer(seqrel, 0);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	lsn = PageGetLSN(BufferGetPage(buf));
	UnlockReleaseBuffer(buf);
	relation_close(seqrel, NoLock);

	/* Returns at once when that much is flushed already. */
	XLogFlush(lsn);
}
