-- The look-up that locks a queue's row for its administration calls,
-- written once for the install script and the update that replaces it.
CREATE FUNCTION claimq.lock_queue(queue text)
RETURNS claimq.queue
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	q claimq.queue;
BEGIN
	PERFORM claimq.check_queue_name(queue);
-- @c
	PERFORM claimq.route_to(queue);
-- @end
	SELECT * INTO q FROM claimq.queue t
	 WHERE t.name OPERATOR(pg_catalog.=) lock_queue.queue FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'queue "%" does not exist', queue
			USING ERRCODE = '42704';
	END IF;
	RETURN q;
END
$$;

COMMENT ON FUNCTION claimq.lock_queue(text) IS
'private: lock a queue''s row and return it (on a distributed install, after routing the call to its shards); raise 42704 if there is none';
