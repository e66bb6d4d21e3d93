/*
 * sql/check-headers.sql: the rule for a job's headers (its trace context,
 * contract 0.5), one body for both editions, included by sql/claimq.sql
 * and the update to 0.8.  Headers are a JSON object whose values are
 * strings, at most CQ_MAX_HEADERS bytes in their text form; the server
 * keeps them as given and never reads them.  The statements that write
 * headers (enqueue, enqueue_many, a replace, create_schedule and
 * alter_schedule) pass them through checked_headers, which returns them
 * or raises 22023 naming the argument.  It is STRICT, so a job without
 * headers costs no call.
 */
CREATE FUNCTION claimq.checked_headers(headers jsonb, argname text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF pg_catalog.jsonb_typeof(headers) OPERATOR(pg_catalog.<>) 'object' THEN
		RAISE EXCEPTION '% must be a JSON object', argname
			USING ERRCODE = '22023',
				  DETAIL = pg_catalog.format('It is a JSON %s.', pg_catalog.jsonb_typeof(headers));
	END IF;
	/* A path, not a query over jsonb_each: a simple expression, half the cost. */
	IF pg_catalog.jsonb_path_exists(headers, 'strict $.* ? (@.type() != "string")') THEN
		RAISE EXCEPTION 'the values of % must be strings', argname
			USING ERRCODE = '22023';
	END IF;
	IF pg_catalog.octet_length(headers::text) OPERATOR(pg_catalog.>) @CQ_MAX_HEADERS@ THEN
		RAISE EXCEPTION '% must be at most % bytes long as text', argname, @CQ_MAX_HEADERS@
			USING ERRCODE = '22023';
	END IF;
	RETURN headers;
END
$$;

COMMENT ON FUNCTION claimq.checked_headers(jsonb,text) IS
'private: headers if they are a JSON object of strings of at most @CQ_MAX_HEADERS@ bytes as text, else 22023';

REVOKE ALL ON FUNCTION claimq.checked_headers(jsonb, text) FROM PUBLIC;
