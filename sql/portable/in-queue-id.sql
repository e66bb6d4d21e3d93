-- The id of the queue a call names in its "queue" argument, "-- @include
-- portable/in-queue-id.sql function=NAME" in a body that declares
-- in_queue_id integer, after its checks: NULL without the argument, 0 for
-- a queue that does not exist (no queue has that id: nothing settles, and
-- check-in-queue.sql raises 42704).  One statement, only with the argument.
	IF @function@.queue IS NOT NULL THEN
		in_queue_id := COALESCE((SELECT q.queue_id FROM claimq.queue q
								  WHERE q.name OPERATOR(pg_catalog.=) @function@.queue), 0);
	END IF;
