BEGIN
	PERFORM claimq.check_queue_name(queue);
	/* The C edition's lock (src/common.c): the same advisory lock tag. */
	PERFORM pg_catalog.pg_advisory_xact_lock(@CQ_PRODUCER_LOCK_KEY@,
		pg_catalog.hashtext(queue COLLATE "C"));
END
