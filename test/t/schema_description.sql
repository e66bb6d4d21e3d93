-- Everything about schema claimq that a fresh install and an updated one
-- must agree on, one line per fact, in a stable order: functions (with a
-- digest of their source), tables, columns, constraints, indexes, views,
-- triggers, sequences, comments, privileges, initial privileges and what
-- pg_dump dumps.  Used by test/t/022_fresh_vs_updated.pl.
WITH ns AS (SELECT 'claimq'::regnamespace AS oid)
SELECT line FROM (
	SELECT 'function ' || p.oid::regprocedure::text || ' returns ' || pg_catalog.pg_get_function_result(p.oid)
		   || ' args (' || pg_catalog.pg_get_function_arguments(p.oid) || ')'
		   || ' lang ' || l.lanname || ' kind ' || p.prokind::text || ' volatile ' || p.provolatile::text
		   || ' strict ' || p.proisstrict || ' secdef ' || p.prosecdef || ' parallel ' || p.proparallel::text
		   || ' config ' || coalesce(p.proconfig::text, '-') || ' src ' || md5(p.prosrc)
		   || ' bin ' || coalesce(p.probin, '-') || ' acl ' || coalesce(p.proacl::text, '-')
		   || ' comment ' || coalesce(obj_description(p.oid, 'pg_proc'), '-') AS line
	  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang, ns WHERE p.pronamespace = ns.oid
	UNION ALL
	SELECT 'relation ' || c.relname || ' kind ' || c.relkind::text || ' acl ' || coalesce(c.relacl::text, '-')
		   || ' options ' || coalesce(c.reloptions::text, '-')
		   || ' comment ' || coalesce(obj_description(c.oid, 'pg_class'), '-')
	  FROM pg_class c, ns WHERE c.relnamespace = ns.oid
	UNION ALL
	SELECT 'column ' || c.relname || '.' || a.attname
		   || ' #' || row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum)
		   || ' ' || format_type(a.atttypid, a.atttypmod) || ' notnull ' || a.attnotnull
		   || ' default ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '-')
		   || ' comment ' || coalesce(col_description(c.oid, a.attnum), '-')
	  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum, ns
	 WHERE c.relnamespace = ns.oid AND c.relkind IN ('r', 'v')
	UNION ALL
	SELECT 'constraint ' || c.relname || '.' || k.conname || ' ' || pg_get_constraintdef(k.oid)
	  FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid, ns WHERE c.relnamespace = ns.oid
	UNION ALL
	SELECT 'domain ' || t.typname || ' ' || format_type(t.typbasetype, t.typtypmod) || ' notnull ' || t.typnotnull
		   || ' acl ' || coalesce(t.typacl::text, '-') || ' comment ' || coalesce(obj_description(t.oid, 'pg_type'), '-')
	  FROM pg_type t, ns WHERE t.typnamespace = ns.oid AND t.typtype = 'd'
	UNION ALL
	SELECT 'constraint ' || t.typname || '.' || k.conname || ' ' || pg_get_constraintdef(k.oid)
	  FROM pg_constraint k JOIN pg_type t ON t.oid = k.contypid, ns WHERE t.typnamespace = ns.oid
	UNION ALL
	SELECT 'index ' || pg_get_indexdef(i.indexrelid)
	  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid, ns WHERE c.relnamespace = ns.oid
	UNION ALL
	SELECT 'view ' || c.relname || ' ' || pg_get_viewdef(c.oid)
	  FROM pg_class c, ns WHERE c.relnamespace = ns.oid AND c.relkind = 'v'
	UNION ALL
	SELECT 'trigger ' || pg_get_triggerdef(t.oid) || ' enabled ' || t.tgenabled::text
	  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid, ns
	 WHERE c.relnamespace = ns.oid AND NOT t.tgisinternal
	UNION ALL
	SELECT 'sequence ' || c.relname || ' ' || format_type(s.seqtypid, NULL) || ' ' || s.seqstart || ' '
		   || s.seqincrement || ' ' || s.seqmin || ' ' || s.seqmax || ' cache ' || s.seqcache || ' ' || s.seqcycle
		   || ' owned by ' || coalesce((SELECT a.attrelid::regclass || '.' || a.attname FROM pg_depend d
										  JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
										 WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'a'), '-')
	  FROM pg_class c JOIN pg_sequence s ON s.seqrelid = c.oid, ns WHERE c.relnamespace = ns.oid
	UNION ALL
	SELECT 'dumped ' || x.rel::regclass || ' where ' || coalesce(e.extcondition[x.n], '-')
	  FROM pg_extension e, unnest(e.extconfig) WITH ORDINALITY AS x(rel, n) WHERE e.extname = 'claimq'
	UNION ALL
	SELECT 'initial privileges ' || pg_describe_object(i.classoid, i.objoid, i.objsubid) || ' ' || i.initprivs::text
	  FROM pg_init_privs i
	 WHERE i.privtype = 'e'
	   AND pg_describe_object(i.classoid, i.objoid, i.objsubid) ~ 'claimq\.'
	UNION ALL
	SELECT 'schema acl ' || coalesce(n.nspacl::text, '-') FROM pg_namespace n, ns WHERE n.oid = ns.oid
	UNION ALL
	SELECT 'extension ' || e.extversion || ' relocatable ' || e.extrelocatable FROM pg_extension e WHERE e.extname = 'claimq'
) facts
ORDER BY line COLLATE "C";
