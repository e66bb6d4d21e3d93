SELECT name COLLATE "C" OPERATOR(pg_catalog.~) '^[A-Za-z0-9_.-]{1,63}$'
