"""The embedded reference study: the published AuthEval case traces and frozen ISIC 2019 split,
shipped as Parquet inside the package (built by scripts/embed_reference.py from shared/reference),
so the demo and the parity tests run on a machine without ../shared."""

from __future__ import annotations

import json
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data" / "reference"

# name -> path under shared/reference
FILES = {
    "trace_mixed": "traces/mixed/case_trace.csv",
    "summary_mixed": "traces/mixed/authority_summary.csv",
    "trace_capacity_ceiling": "traces/capacity_ceiling/case_trace.csv",
    "trace_safety_floor": "traces/safety_floor/case_trace.csv",
    "trace_medgemma_readout": "traces/proposal_dependence/case_trace_medgemma_readout.csv",
    "trace_llava_med_head": "traces/proposal_dependence/case_trace_llava_med_head.csv",
    "trace_clip_probe": "traces/proposal_dependence/case_trace_clip_probe.csv",
    "split_freeze": "isic2019/split_freeze.csv",
    "phash_exact_duplicate_components": "isic2019/phash_exact_duplicate_components.csv",
    "phash_duplicate_report": "isic2019/phash_duplicate_report.csv",
    "frozen_proposal_heads": "isic2019/frozen_proposal_heads.csv",
    "authority_log_example": "examples/authority_log_example.csv",
}

# (analysis, study, mechanism, regime, embedded trace): the published study, one row per analysis.
REFERENCE_ANALYSES = (
    ("mixed", "regimes", "MedGemma readout", "mixed", "trace_mixed"),
    ("capacity_ceiling", "regimes", "MedGemma readout", "capacity_ceiling", "trace_capacity_ceiling"),
    ("safety_floor", "regimes", "MedGemma readout", "safety_floor", "trace_safety_floor"),
    ("LLaVA-Med head", "mechanisms", "LLaVA-Med head", "capacity_ceiling", "trace_llava_med_head"),
    ("MedGemma readout", "mechanisms", "MedGemma readout", "capacity_ceiling", "trace_medgemma_readout"),
    ("CLIP probe", "mechanisms", "CLIP probe", "capacity_ceiling", "trace_clip_probe"),
)

# The published paired contrast (arm_a minus arm_b).
PUBLISHED_CONTRAST = ("CLIP probe", "LLaVA-Med head")


def reference_path(name: str) -> Path:
    """Path of an embedded reference table."""
    if name not in FILES:
        raise KeyError(f"no embedded reference table {name!r}; known: {', '.join(FILES)}")
    return DATA_DIR / f"{name}.parquet"


def manifest() -> dict:
    return json.loads((DATA_DIR / "manifest.json").read_text(encoding="utf-8"))


def trace_catalog():
    """The study's traces as an Arrow table (analysis, study, mechanism, regime, file)."""
    import pyarrow as pa

    rows = [
        {"analysis": a, "study": s, "mechanism": m, "regime": r, "file": str(reference_path(t))}
        for a, s, m, r, t in REFERENCE_ANALYSES
    ]
    return pa.Table.from_pylist(rows)


def register_reference(con):
    """Register `trace_catalog`, `reference_traces` (the six case traces, sql/ingest/reference_traces.sql) and
    `split_freeze` on the DuckDB connection `con`, for the SQL built from the published study; returns
    `con`."""
    from warehouse.sql import run

    catalog = trace_catalog()
    con.register("trace_catalog", catalog)
    con.register("reference_traces", run(con, "ingest/reference_traces", {"files": catalog.column("file").to_pylist()}))
    con.register("split_freeze", con.read_parquet(str(reference_path("split_freeze"))).arrow().read_all())
    return con
