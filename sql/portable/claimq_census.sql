BEGIN
	/* No shared memory in the portable edition: no rows. */
	RETURN;
END
