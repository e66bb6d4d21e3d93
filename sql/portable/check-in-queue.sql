-- A call's trailing "queue" argument, "-- @include portable/check-in-queue.sql
-- function=NAME ids=EXPR" in a body after its other checks: given, it
-- must be a valid name, and every job listed in EXPR must be in that
-- queue (claimq.check_in_queue; src/common.c, cq_in_queue_*).
	IF @function@.queue IS NOT NULL THEN
		PERFORM claimq.check_in_queue(@function@.queue, @ids@);
	END IF;
