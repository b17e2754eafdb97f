"""Proposal mechanisms and model-training code (torch, transformers, scikit-learn); no Dagster imports."""
