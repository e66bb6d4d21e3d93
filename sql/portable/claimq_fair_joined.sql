BEGIN
	/* The portable edition keeps no shares in shared memory. */
END
