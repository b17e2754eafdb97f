"""`autheval site land`: a hub lake lands signed site exports and pools them, in this process.

Each `--export DIR` is verified first against the lake's registered keys and every export it holds
(autheval.sites.lake.verify_export: one line, exit 2, the lake untouched), then copied into
<landing>/exports/ under a hidden name and renamed in, so the landing step never sees half of it. The
job site_exports_job (assets/site_exports.py) then lands everything waiting there and pools every landed
export into the lake's tables, one snapshot; its runs are recorded in the lake's Dagster instance (the
one `autheval ui` serves)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dagster import DagsterEventType, EnvVar

from assets.resources import PROTOCOL_ENV, check_environment
from assets.site_exports import site_exports_job
from autheval.errors import RecordError
from autheval.monitoring.landing import LANDED_TABLE
from autheval.monitoring.protocol import load_protocol
from autheval.sites.lake import (
    SITE_EXPORTS,
    check_own_folders,
    discard,
    export_name_problem,
    exports_dir,
    lake_keys,
    landed_exports,
    printable,
    verify_export,
)
from dagster_project.definitions import build_definitions, lake_instance
from dagster_project.demo import QUIET
from dagster_project.monitor_run import _failure, _materialized, _records
from warehouse.lake import Lake

EXIT_OK, EXIT_FAILED, EXIT_REFUSED = 0, 1, 2


def site_land(
    lake: Path,
    exports: list[Path],
    protocol: Path | None = None,
    out: Callable[[str], None] = print,
    rules: dict | None = None,
) -> int:
    """Copy in the given exports (each verified first), land what waits and pool; 0 when every export
    landed, 2 when one waiting in the landing folder was refused (moved to rejected/, said on its line),
    1 when the run failed otherwise. Bad input (a refused --export, no registered keys, a lake holding
    landed logs) raises RecordError before anything is written."""
    check_environment()
    protocol = protocol or EnvVar(PROTOCOL_ENV).get_value() or None  # as the protocol resource reads it
    declared = load_protocol(protocol)  # a bad protocol: one line, nothing landed
    root = Path(lake)
    if not root.is_dir():
        raise RecordError(str(lake), None, "no such lake folder (--lake); make it and its trusted_keys/ first")
    store = Lake(root)
    if store.has_table(LANDED_TABLE):
        raise RecordError(
            str(lake), None, "the lake holds landed logs (landed_records): a hub lake pools site exports only"
        )
    trusted = lake_keys(store.root)
    defs = build_definitions(str(root), protocol=str(protocol) if protocol else None)
    landing = Path(defs.resources["lake"].landing_dir())
    landed = landed_exports(store, trusted, landing)
    check_own_folders(landing)
    waiting = exports_dir(landing)
    copies: list = []  # (hidden copy, name, export): every --export verified before any is copied in
    try:
        for folder in exports:
            name = Path(folder).resolve().name
            problem = export_name_problem(name)
            if problem:
                raise RecordError(printable(str(folder)), None, f"an export folder's name {problem}")
            if (waiting / name).exists() or (waiting / name).is_symlink() or name in (n for _, n, _ in copies):
                raise RecordError(str(waiting / name), None, f"an export waits under this name; {folder} not copied")
            copy, export = verify_export(Path(folder), waiting, trusted, landed, declared, rules)
            copies.append((copy, name, export))
            landed.append(export)
    except BaseException:
        discard(copies)
        raise
    for copy, name, _ in copies:
        copy.rename(waiting / name)  # a hidden copy renamed in: the landing step sees all of it or nothing
    config = {"rules_version": rules["version"], "rules_sha256": rules["sha256"]} if rules else {}
    with lake_instance(store) as instance:
        result = defs.resolve_job_def(site_exports_job.name).execute_in_process(
            instance=instance, run_config={**QUIET, "ops": {"site_exports": {"config": config}}}, raise_on_error=False
        )
        if not result.success:
            refused = _refusals(instance, result.run_id)
            if refused:
                return _say_refused(refused, out)
            out(f"failed    {_failure(instance, result.run_id)}")
            return EXIT_FAILED
        metadata = _materialized(instance, result.run_id)
    out(f"landed    {metadata.get('landed', '?')}: {SITE_EXPORTS} of sites {metadata.get('sites', '?')}")
    out(f"pooled    {metadata.get('tables', '?')}")
    refused = metadata.get("refused") or []
    return _say_refused(refused, out) if refused else EXIT_OK


def _refusals(instance, run_id: str) -> list[str]:
    """The refusals a failed landing step names in its failure's metadata (one per refused export)."""
    for event in _records(instance, run_id, DagsterEventType.STEP_FAILURE):
        failure = getattr(event.event_specific_data, "user_failure_data", None)
        refused = getattr(failure, "metadata", {}).get("refused") if failure is not None else None
        if refused is not None:
            return list(getattr(refused, "value", refused))
    return []


def _say_refused(refused: list[str], out: Callable[[str], None]) -> int:
    """One `rejected` line per refused export (each a printable line of its own); exit 2."""
    for line in refused:
        out(f"rejected  {line}")
    return EXIT_REFUSED
