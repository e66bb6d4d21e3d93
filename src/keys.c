/*-------------------------------------------------------------------------
 *
 * keys.c
 *		Dedup key claims (idempotency keys): claim_keys(), release_keys()
 *		and the sweep of expired key claims.
 *
 *		(free or expired) -> held by a token, until ttl	claim_keys
 *		held by the token -> free						release_keys
 *		expired -> deleted								the reclaimer's sweep
 *
 * A key is held by the row (scope, key) in claimq.key_claim whose
 * expires_at has not passed.  claim_keys first inserts every key it asks
 * for with ON CONFLICT DO NOTHING: a key nobody holds is won, and a key
 * another transaction is inserting right now makes this call wait for it
 * and win only if that transaction aborts.  Keys whose row exists but has
 * expired are then taken over by an UPDATE that re-checks the expiry under
 * the row lock, so of two callers only one takes a key over.  Keys are
 * inserted in sorted order, so concurrent calls lock them in one order and
 * cannot deadlock on each other.
 *
 * release_keys deletes only rows held with the given token, so a caller
 * can never free a key that somebody else won, including a key that
 * expired and was won again.  As in settle.c, the outcome of each input
 * pair is matched in C with the pair tables of common.c, in O(n).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"

#include "claimq.h"

PG_FUNCTION_INFO_V1(claimq_claim_keys);
PG_FUNCTION_INFO_V1(claimq_release_keys);

/*
 * Enter the (key, token) rows of the last SPI result into won, keyed by
 * key alone.
 */
static void
cq_note_won_keys(HTAB *won)
{
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		bool		isnull;
		CqPairEntry *entry;

		entry = cq_pair(won, TextDatumGetCString(cq_spi_value(row, 1, &isnull)),
						0, 0, true);
		entry->value = DatumGetInt64(cq_spi_value(row, 2, &isnull));
		entry->done = false;
	}
}

static char *
cq_scope_arg(FunctionCallInfo fcinfo)
{
	cq_arg_not_null(fcinfo, 0, "scope");
	return text_to_cstring(PG_GETARG_TEXT_PP(0));
}

/*
 * claim_keys(scope text, keys text[], ttl interval)
 * returns table(key text, token bigint): the keys this call won, in the
 * order of their first appearance in keys.
 */
Datum
claimq_claim_keys(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr token_plan = NULL;
	static SPIPlanPtr insert_plan = NULL;
	static SPIPlanPtr takeover_plan = NULL;
	Oid			argtypes[4] = {TEXTOID, TEXTARRAYOID, INT8OID, TIMESTAMPTZOID};
	Datum		values[4];
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *keys;
	Datum	   *keyv;
	Interval   *ttl;
	int			nkeys;
	TimestampTz now;
	bool		isnull;
	int64		epoch;
	HTAB	   *won;
	char	   *scope;

	cq_require_primary(fcinfo);
	scope = cq_scope_arg(fcinfo);
	keys = cq_array_arg(fcinfo, 1, "keys", false);
	cq_arg_not_null(fcinfo, 2, "ttl");
	ttl = cq_delay_arg(fcinfo, 2, "ttl", false);
	nkeys = ArrayGetNItems(ARR_NDIM(keys), ARR_DIMS(keys));
	if (cq_forward_wanted_scope(scope))
		return cq_forward(fcinfo);

	InitMaterializedSRF(fcinfo, 0);
	if (nkeys == 0)
		return (Datum) 0;

	SPI_connect();
	epoch = cq_token_epoch();
	cq_plan(&token_plan, "SELECT pg_catalog.nextval('claimq.token_seq')",
			0, NULL);
	cq_execute(token_plan, NULL, NULL, SPI_OK_SELECT);
	values[2] = Int64GetDatum(epoch + DatumGetInt64(cq_spi_value(0, 1, &isnull)));
	cq_tokens_durable();

	/* Claims won now expire ttl after this one reading of the clock. */
	now = GetCurrentTimestamp();
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PointerGetDatum(keys);
	values[3] = TimestampTzGetDatum(cq_time_plus(now, ttl));
	cq_plan(&insert_plan,
			"INSERT INTO claimq.key_claim AS k (scope, key, token, expires_at)"
			" SELECT DISTINCT $1, u.key, $3, $4"
			"   FROM pg_catalog.unnest($2) AS u(key)"
			"  ORDER BY 2"
			" ON CONFLICT (scope, key) DO NOTHING"
			" RETURNING k.key, k.token",
			4, argtypes);
	cq_execute(insert_plan, values, NULL, SPI_OK_INSERT_RETURNING);
	won = cq_pair_table("claimq won keys", nkeys);
	cq_note_won_keys(won);

	/* Some keys were held, perhaps only by claims that have expired. */
	if (SPI_processed < (uint64) nkeys)
	{
		Oid			takeover_types[5] = {TEXTOID, TEXTARRAYOID, INT8OID,
		TIMESTAMPTZOID, TIMESTAMPTZOID};
		Datum		takeover_values[5];

		memcpy(takeover_values, values, sizeof(values));
		takeover_values[4] = TimestampTzGetDatum(now);
		cq_plan(&takeover_plan,
				"UPDATE claimq.key_claim k SET token = $3, expires_at = $4"
				" WHERE k.scope = $1 AND k.key = ANY ($2)"
				"   AND k.expires_at < $5"
				" RETURNING k.key, k.token",
				5, takeover_types);
		cq_execute(takeover_plan, takeover_values, NULL,
				   SPI_OK_UPDATE_RETURNING);
		cq_note_won_keys(won);
	}

	/* The keys won, in the order the caller first named them. */
	deconstruct_array(keys, TEXTOID, -1, false, TYPALIGN_INT,
					  &keyv, NULL, &nkeys);
	for (int i = 0; i < nkeys; i++)
	{
		CqPairEntry *entry = cq_pair(won, TextDatumGetCString(keyv[i]), 0, 0,
									 false);
		Datum		rowvalues[2];
		bool		rownulls[2] = {false, false};

		if (entry == NULL || entry->done)
			continue;
		entry->done = true;
		rowvalues[0] = keyv[i];
		rowvalues[1] = Int64GetDatum(entry->value);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 rowvalues, rownulls);
	}
	SPI_finish();
	return (Datum) 0;
}

/*
 * release_keys(scope text, keys text[], tokens bigint[])
 * returns table(key text, outcome text), one row per input pair in order:
 * ok (released, or released by an earlier pair of this call), stale (held
 * under another token), missing (not held).
 */
Datum
claimq_release_keys(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr release_plan = NULL;
	static SPIPlanPtr holders_plan = NULL;
	Oid			argtypes[3] = {TEXTOID, TEXTARRAYOID, INT8ARRAYOID};
	Datum		values[3];
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ArrayType  *keys;
	ArrayType  *tokens;
	Datum	   *keyv;
	Datum	   *tokenv;
	char	  **keystr;
	int			nkeys;
	int			ntokens;
	HTAB	   *released;
	HTAB	   *held = NULL;
	bool		all_released = true;
	char	   *scope;

	cq_require_primary(fcinfo);
	scope = cq_scope_arg(fcinfo);
	keys = cq_array_arg(fcinfo, 1, "keys", false);
	tokens = cq_array_arg(fcinfo, 2, "tokens", false);
	deconstruct_array(keys, TEXTOID, -1, false, TYPALIGN_INT,
					  &keyv, NULL, &nkeys);
	deconstruct_array(tokens, INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
					  TYPALIGN_DOUBLE, &tokenv, NULL, &ntokens);
	if (nkeys != ntokens)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("keys and tokens must have the same number of elements")));
	if (cq_forward_wanted_scope(scope))
		return cq_forward(fcinfo);

	InitMaterializedSRF(fcinfo, 0);
	if (nkeys == 0)
		return (Datum) 0;

	keystr = palloc(nkeys * sizeof(char *));
	for (int i = 0; i < nkeys; i++)
		keystr[i] = TextDatumGetCString(keyv[i]);

	SPI_connect();
	cq_plan(&release_plan,
			"DELETE FROM claimq.key_claim k"
			" USING ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3))"
			"       AS i(key, token)"
			" WHERE k.scope = $1 AND k.key = i.key AND k.token = i.token"
			" RETURNING k.key, k.token",
			3, argtypes);
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PointerGetDatum(keys);
	values[2] = PointerGetDatum(tokens);
	cq_execute(release_plan, values, NULL, SPI_OK_DELETE_RETURNING);

	released = cq_pair_table("claimq released keys", SPI_processed);
	for (uint64 row = 0; row < SPI_processed; row++)
	{
		bool		isnull;

		(void) cq_pair(released,
					   TextDatumGetCString(cq_spi_value(row, 1, &isnull)), 0,
					   DatumGetInt64(cq_spi_value(row, 2, &isnull)), true);
	}
	for (int i = 0; i < nkeys && all_released; i++)
		all_released = cq_pair(released, keystr[i], 0,
							   DatumGetInt64(tokenv[i]), false) != NULL;

	/* Tell stale from missing: which of the keys are held now? */
	if (!all_released)
	{
		cq_plan(&holders_plan,
				"SELECT k.key FROM claimq.key_claim k"
				" WHERE k.scope = $1 AND k.key = ANY ($2)",
				2, argtypes);
		cq_execute(holders_plan, values, NULL, SPI_OK_SELECT);
		held = cq_pair_table("claimq held keys", SPI_processed);
		for (uint64 row = 0; row < SPI_processed; row++)
		{
			bool		isnull;

			(void) cq_pair(held,
						   TextDatumGetCString(cq_spi_value(row, 1, &isnull)),
						   0, 0, true);
		}
	}

	for (int i = 0; i < nkeys; i++)
	{
		const char *outcome;
		Datum		outvalues[2];
		bool		outnulls[2] = {false, false};

		if (cq_pair(released, keystr[i], 0, DatumGetInt64(tokenv[i]), false))
			outcome = "ok";
		else if (cq_pair(held, keystr[i], 0, 0, false))
			outcome = "stale";
		else
			outcome = "missing";
		outvalues[0] = keyv[i];
		outvalues[1] = CStringGetTextDatum(outcome);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 outvalues, outnulls);
	}
	SPI_finish();
	return (Datum) 0;
}

/*
 * Delete up to max_keys expired key claims.  The caller has connected SPI.
 */
uint64
cq_sweep_keys(int32 max_keys)
{
	static SPIPlanPtr plan = NULL;
	Oid			argtypes[2] = {INT4OID, TIMESTAMPTZOID};
	Datum		values[2];

	cq_plan(&plan,
			"DELETE FROM claimq.key_claim k"
			" WHERE k.ctid = ANY (ARRAY("
			"   SELECT e.ctid FROM claimq.key_claim e"
			"    WHERE e.expires_at < $2 ORDER BY e.expires_at LIMIT $1"
			"    FOR UPDATE SKIP LOCKED))"
			"   AND k.expires_at < $2",
			2, argtypes);
	values[0] = Int32GetDatum(max_keys);
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	cq_execute(plan, values, NULL, SPI_OK_DELETE);
	return SPI_processed;
}
