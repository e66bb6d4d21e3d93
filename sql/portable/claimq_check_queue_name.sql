DECLARE
	shown text;
BEGIN
	IF queue IS NULL THEN
		RAISE EXCEPTION 'argument "queue" must not be null'
			USING ERRCODE = '22004';
	END IF;
	IF NOT claimq.valid_name(queue) THEN
		/* Quote at most a name's worth of a hostile argument. */
		shown := pg_catalog.left(queue, 64);
		WHILE pg_catalog.octet_length(shown) OPERATOR(pg_catalog.>) 64 LOOP
			shown := pg_catalog.left(shown, -1);
		END LOOP;
		RAISE EXCEPTION 'invalid queue name "%"', shown
			USING ERRCODE = '22023',
				  DETAIL = 'A queue name is 1 to 63 characters, each a letter, a digit, "_", "-" or ".".';
	END IF;
END
