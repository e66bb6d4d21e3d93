BEGIN
	/* The portable edition keeps no shares in shared memory: the trigger is not created. */
	RETURN NULL;
END
