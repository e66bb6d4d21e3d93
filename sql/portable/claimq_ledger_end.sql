BEGIN
	/* The portable edition keeps no census, counters or floors. */
END
