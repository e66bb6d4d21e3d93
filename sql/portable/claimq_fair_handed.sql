	/* The portable edition keeps no shares in shared memory. */
	SELECT 0, 0, NULL::text, 0::bigint WHERE false
