-- A call's trailing "queue" argument, "-- @include check-in-queue.sql
-- function=NAME ids=EXPR" in a body written in PL/pgSQL (dependencies in
-- both editions; the portable edition's settles on the path of the pairs
-- left unsettled, and of no pairs, and its cancel, status and wait_for):
-- given, it must be a valid name, and every job listed in EXPR must be in
-- that queue (claimq.check_in_queue; src/common.c, cq_in_queue_*).  The
-- portable settles' fences (portable/in-queue.sql) leave the jobs of other
-- queues unsettled, so that they come here.
	IF @function@.queue IS NOT NULL THEN
		PERFORM claimq.check_in_queue(@function@.queue, @ids@);
	END IF;
