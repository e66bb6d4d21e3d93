/*-------------------------------------------------------------------------
 *
 * token.c
 *		Fencing tokens: what makes a token, and why none is ever handed out
 *		twice, across crashes and failovers alike.
 *
 * A token is the timeline's epoch (the timeline, less one, in bits 48 and
 * up) plus a value of claimq.token_seq, which stays below 2^48.  claim()
 * draws one value per job, claim_keys() one per call.
 *
 * A sequence hands out values it has WAL-logged ahead (by its cache size,
 * at least 32), and the WAL record that logged them is flushed only by
 * some later commit.  Under synchronous_commit = off that commit is not
 * waited for: a crash can lose the record along with the claim that used
 * its values, and after recovery the sequence would hand the same values
 * out again, while the first holder still believes its claim stands.  So
 * before a token leaves the server, the record that logged it must be on
 * disk: cq_tokens_durable() flushes WAL up to the sequence page's LSN,
 * which is at or past the record of every value handed out so far.  The
 * sequence's cache (set by the update to 0.3) makes that a flush per
 * cache-full of tokens in each backend, not one per claim; with
 * synchronous commit the flush has usually happened already.
 *
 * Failover is the other way to lose WAL: a standby promoted before the
 * old primary's last records arrived.  Promotion starts a new timeline,
 * and with it a higher epoch, so the new primary's tokens cannot repeat
 * the old one's either.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/lsyscache.h"

#include "claimq.h"

/*
 * What to add to a value of claimq.token_seq to make a token.  On the
 * first timeline tokens are the sequence's values themselves.
 */
int64
cq_token_epoch(void)
{
	return ((int64) GetWALInsertionTimeLine() - 1) << CQ_TOKEN_EPOCH_BITS;
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
