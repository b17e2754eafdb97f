"""The deployment simulator's flag constants (autheval.monitoring.deployment_sim), importable without numpy or
pyarrow: `autheval --help` registers `synth deployment` with them and loads nothing heavy."""

DEPLOYMENT_SEED = 20260718
DRIFT_KINDS = ("proposer_quality", "review_capacity", "case_mix")
START = "2026-01"
DRIFT_SYNTAX = "SITE:KIND:AMOUNT:from=MONTH[:to=STRATUM][:version=NAME], e.g. site-2:proposer_quality:-0.5:from=7"
