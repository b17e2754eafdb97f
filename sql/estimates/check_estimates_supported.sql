-- Asset check: every reported number is supported by its record level: an unavailable metric carries
-- no number and a reason; the gap and delta are only numbers for full counterfactual records (or a
-- zero gap where nothing changed); nothing is a number for proposal-only records except J_std.
-- Input: estimates.
SELECT count(*) AS violations, min(analysis || ' / ' || unit || ' / ' || metric) AS example
FROM estimates
WHERE (NOT available AND (estimate IS NOT NULL OR ci_lower IS NOT NULL OR reason IS NULL))
   OR (available AND estimate IS NULL AND metric <> 'delta')
   OR (available AND metric IN ('J_auth', 'delta', 'Delta_utility')
       AND record_level <> 'full_counterfactual')
   OR (available AND metric = 'Delta_authority' AND record_level = 'role_separated' AND estimate <> 0)
   OR (available AND record_level = 'proposal_only' AND metric <> 'J_std')
