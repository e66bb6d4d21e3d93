BEGIN
	/* No shared memory in the portable edition: metrics() leaves it out. */
	RETURN;
END
