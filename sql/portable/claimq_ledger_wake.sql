BEGIN
	/* Nothing to wake in the portable edition: waiters poll. */
	IF queue_id IS NULL THEN
		RAISE EXCEPTION 'argument "queue_id" must not be null'
			USING ERRCODE = '22004';
	END IF;
END
