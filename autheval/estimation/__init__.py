"""Estimation (stage `estimates`): point estimates, bootstraps, the delta method, other engines, multiplicity,
subgroups and provenance."""
