-- A call's trailing "queue" argument, on the path of the pairs a settle
-- left unsettled (and of no pairs), "-- @include
-- portable/check-in-queue.sql function=NAME ids=EXPR": given, it must be a
-- valid name, and every job listed in EXPR must be in that queue
-- (claimq.check_in_queue; src/common.c, cq_in_queue_*).  The settles'
-- fences (in-queue.sql) leave the jobs of other queues unsettled, so that
-- they come here.
	IF @function@.queue IS NOT NULL THEN
		PERFORM claimq.check_in_queue(@function@.queue, @ids@);
	END IF;
