"""The raw-data path: ISIC 2019 (or ISIC-Archive-style) files -> images, perceptual hashes,
duplicates, clusters and splits, as Arrow tables. Pure library code: no Dagster imports.

Modules: ingest (images table), phash (image_hashes), duplicates (exact groups, near-duplicate
components via a multi-index SQL join), clusters (AuthEval cluster ids), splits (frozen or computed),
synth (a synthetic ISIC-shaped cohort), pipeline (run_raw_path: all of it), cli (`autheval synth`).
"""
