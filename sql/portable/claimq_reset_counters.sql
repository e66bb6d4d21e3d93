BEGIN
	/* No shared memory in the portable edition: no counters to reset. */
END
