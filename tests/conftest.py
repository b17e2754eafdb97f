"""Shared fixtures. Tests that use the published reference files read ../shared/reference when it is
there and the package's embedded Parquet copies otherwise, so the suite runs from a bare clone."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "reference"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from autheval.reference_data import FILES, reference_path


def reference_file(name: str) -> Path:
    """The shared CSV when present, else the embedded Parquet copy."""
    shared = SHARED / FILES[name]
    return shared if shared.exists() else reference_path(name)


def published_summary() -> list[dict]:
    """The published mixed authority_summary.csv as text cells (exact bits preserved)."""
    path = SHARED / FILES["summary_mixed"]
    if path.exists():
        with open(path, newline="") as handle:
            return list(csv.DictReader(handle))
    import pyarrow.parquet as pq

    rows = pq.read_table(reference_path("summary_mixed")).to_pylist()
    return [{k: "" if v is None else repr(v) if isinstance(v, float) else str(v) for k, v in r.items()} for r in rows]


def read_csv_rows(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def exec_after(setup: str) -> list[str]:
    """The start of a command line that runs the Python statements `setup` (os, signal and sys imported),
    then execs this interpreter with the rest of the command line: what a preexec_fn would do to the
    child (a closed descriptor, a signal's disposition carry over exec), without Python forking this
    (large) test process first, which the kernel refused once ("Cannot allocate memory")."""
    then = "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
    return [sys.executable, "-c", f"import os, signal, sys; {setup}; {then}"]


def run_cli(
    *args: str, cwd: Path | None = None, env: dict | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autheval", *args],
        cwd=cwd or ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def land_and_monitor(root: Path, model, drift: str | None = None, protocol: Path | None = None) -> tuple[Path, int]:
    """A lake at root/lake whose landing folder got every monthly log of the simulated deployment `model`
    (with the planted `drift`, if any), monitored once by `monitor run` in this process under `protocol`
    (None: the packaged one): (lake, exit code)."""
    import shutil
    import warnings
    from dataclasses import replace

    from autheval.monitoring.deployment_sim import parse_drift, write_deployment
    from dagster_project.monitor_run import monitor_run

    if drift:
        model = replace(model, drifts=(parse_drift(drift, model.sites, model.months),))
    paths = write_deployment(model, root / "sim")
    lake = root / "lake"
    (lake / "landing").mkdir(parents=True)
    for path in paths:
        shutil.copy(path, lake / "landing" / path.name)
    with warnings.catch_warnings():  # few clusters: noisy intervals, said by a warning
        warnings.simplefilter("ignore")
        return lake, monitor_run(lake, protocol, out=lambda line: None, settle_seconds=0)


@pytest.fixture
def tmp_out(tmp_path: Path) -> Path:
    return tmp_path / "out"
