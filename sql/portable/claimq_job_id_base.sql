SELECT 0::bigint
