/* claimq--0.6.1--0.6.2.sql: the ledger (the census fed by claimq's own paths, a statement-level guard against other writers), flow control's rules written once, copy_grants */

\echo Use "ALTER EXTENSION claimq UPDATE TO '0.6.2'" to load this file. \quit

/*------------------------------------------------------------------------
 * 1. The ledger
 *-----------------------------------------------------------------------*/

/*------------------------------------------------------------------------
 * 2. Flow control's rules, copy_grants
 *-----------------------------------------------------------------------*/
