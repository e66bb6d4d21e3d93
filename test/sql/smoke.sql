\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only on
CREATE EXTENSION pgtap;
CREATE EXTENSION claimq;
BEGIN;
SELECT plan(2);
SELECT lives_ok($$SELECT claimq.create_queue('smoke')$$, 'create_queue');
SELECT is(claimq.enqueue('smoke', '{}'), 1::bigint, 'first job id');
SELECT * FROM finish();
ROLLBACK;
