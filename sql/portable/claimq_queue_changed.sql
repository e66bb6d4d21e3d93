BEGIN
	/* The portable edition keeps no queue's settings: the trigger is not created. */
	RETURN NULL;
END
