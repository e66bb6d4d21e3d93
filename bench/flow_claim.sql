-- Flow control's cost: claims only, from queue flow<:q> (1 plain, 2 with
-- every group blocked).  The claimed jobs stay claimed.
SELECT count(*) FROM claimq.claim('flow' || :q, :batch, lease => '1 hour');
