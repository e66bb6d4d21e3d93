-- The first check of a body that writes, "-- @include check-primary.sql
-- function=NAME": claimq changes its jobs, key claims and schedules only
-- on a primary (src/common.c, cq_require_primary).
	IF pg_catalog.pg_is_in_recovery() THEN
		RAISE EXCEPTION 'cannot run claimq.@function@() during recovery'
			USING ERRCODE = '25006',
				  DETAIL = 'This server is a standby: claimq''s jobs, key claims and schedules change only on the primary.',
				  HINT = 'Connect to the primary server.';
	END IF;
