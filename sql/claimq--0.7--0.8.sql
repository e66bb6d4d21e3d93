/* claimq--0.7--0.8.sql: tokens that never repeat (the register of token epochs) */

-- @extension
\echo Use "ALTER EXTENSION claimq UPDATE TO '0.8'" to load this file. \quit
-- @end
-- @include portable/update--0.7--0.8-begin.sql

-- @include portable/update--0.7--0.8.sql
