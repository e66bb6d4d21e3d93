/* claimq--0.2--0.3.sql: room on every page of claimq.job for the claim's update */

\echo Use "ALTER EXTENSION claimq UPDATE TO '0.3'" to load this file. \quit

/*
 * A claim rewrites the job's row (a new row version, as every UPDATE
 * makes).  With free space left on the page, the new version goes on the
 * same page: the update touches one heap page instead of two, and its WAL
 * record carries only the bytes that changed instead of the whole row, and
 * no extra lock record.  Pages filled to half leave room for every job on
 * them to be claimed once before pruning frees the space of completed ones.
 * Takes effect for pages filled from now on.
 */
ALTER TABLE claimq.job SET (fillfactor = 50);
