-- The fence's test of a call's "queue" argument, "-- @include
-- portable/in-queue.sql" as a line of a settle's WHERE clause, in a body
-- that set in_queue_id (in-queue-id.sql): with the argument, only the jobs
-- of that queue are settled; the calls tell the jobs of other queues apart
-- on the path of the pairs left unsettled (check-in-queue.sql), so that a
-- call in the right queue costs one statement more than without it, and a
-- call without it a test of a NULL.
		   AND (in_queue_id IS NULL OR j.queue_id OPERATOR(pg_catalog.=) in_queue_id)
