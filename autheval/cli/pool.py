"""`autheval pool`: the hub pools signed site exports (autheval.sites.pool) into estimates.csv,
heterogeneity.csv and summary.json. The heavy imports happen only when the command runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from autheval.cli.flags import add_command, check_seed, path_flag
from autheval.cli.site import add_hub_declarations, add_hub_seed_flag

POOL_HELP = "pool signed site exports into the estimates one lake of their records would give"
POOL_DESCRIPTION = """\
Pool signed site exports (`autheval site export`): every export must be signed by the key registered in
--trust for its site (<site>.pub), unaltered, well formed, no replay, one per site, of the same software,
scheme, seed and replicates and the same paired contrasts. Writes estimates.csv (evaluate's columns:
poisson_by_site bootstrap and delta-method rows, pooled and per site), paired_contrast.csv (where the
exports hold paired contrasts), heterogeneity.csv (Cochran's Q and I^2 of Delta_authority across sites)
and summary.json to --output-dir (docs/sites.md). With --protocol, the exports' monitor parts become
monitor.csv, monitor_case_mix.csv and monitor_decisions.csv (the lake's monitor of all the sites' logs);
with --scheme, per-cluster exports give evaluate's exact reference or evaluator intervals."""


def cmd_pool(args) -> int:
    from autheval.errors import RecordError
    from autheval.estimation.study import ESTIMATE_COLUMNS
    from autheval.reporting.outputs import csv_text, write_files
    from autheval.sites.export import rules_entry
    from autheval.sites.pool import POOLED_CONTRAST_COLUMNS, check_exports, pool, read_export
    from autheval.sites.signing import trusted_keys

    check_seed(args.seed)
    if args.reps is not None and args.scheme is None:
        raise RecordError("--reps", None, "sets the replicates of an exact --scheme (reference or evaluator)")
    out = Path(args.output_dir).resolve()
    for folder in [*args.export, args.trust]:
        f = Path(folder).resolve()
        if out == f or f in out.parents:
            raise RecordError("--output-dir", None, f"{args.output_dir} is or lies inside the input {folder}")
    protocol = None
    if args.protocol is not None:
        from autheval.monitoring.protocol import load_protocol

        protocol = load_protocol(args.protocol)
    rules = rules_entry(args.rules) if args.rules is not None else None
    trusted = trusted_keys(args.trust)
    exports = [read_export(folder, trusted) for folder in args.export]
    exact = None
    if args.scheme is not None:
        from autheval.estimation.estimators import DEFAULT_REPS, DEFAULT_SEEDS, check_reps

        if not all(e.manifest["per_cluster"] for e in exports):
            plain = next(e for e in exports if not e.manifest["per_cluster"])
            raise RecordError(
                "--scheme",
                None,
                f"{args.scheme} resamples clusters: every export must be per-cluster (--per-cluster), "
                f"and {plain.folder} is not",
            )
        seed = DEFAULT_SEEDS[args.scheme] if args.seed is None else args.seed
        exact = (args.scheme, check_reps(DEFAULT_REPS if args.reps is None else args.reps), seed)
    check_exports(exports, None if exact else args.seed, rules=rules)
    files = {}
    summary: dict = {"command": "pool"}
    if exports[0].analyses:
        rows, contrasts, summary = pool(exports, exact=exact)
        het = [{"analysis": a, **h} for a, entry in summary["analyses"].items() for h in entry["heterogeneity"]]
        files["estimates.csv"] = csv_text(ESTIMATE_COLUMNS, rows)
        files["heterogeneity.csv"] = csv_text(
            ("analysis", "unit", "metric", "sites", "cochran_q", "df", "i_squared"), het
        )
        if contrasts:
            files["paired_contrast.csv"] = csv_text(POOLED_CONTRAST_COLUMNS, contrasts)
    elif protocol is None:
        raise RecordError("--protocol", None, "the exports hold monitor parts only: give the hub's --protocol")
    if protocol is not None:
        files.update(_monitor_files(exports, protocol, summary))
    files["summary.json"] = json.dumps(summary, indent=2, sort_keys=True) + "\n"
    for path in write_files(args.output_dir, files):
        print(path)
    _remove_stale(Path(args.output_dir), files)
    return 0


POOL_FILES = (
    "estimates.csv",
    "heterogeneity.csv",
    "paired_contrast.csv",
    "monitor.csv",
    "monitor_case_mix.csv",
    "monitor_decisions.csv",
    "summary.json",
)


def _remove_stale(out: Path, written: dict) -> None:
    """Remove the files a previous pool wrote into `out` that this one did not (a reused --output-dir
    holds one pool's results, never an old monitor.csv beside a new summary.json)."""
    for name in POOL_FILES:
        path = out / name
        if name not in written and (path.is_symlink() or path.is_file()):
            path.unlink()


def _monitor_files(exports, protocol, summary: dict) -> dict[str, str]:
    """monitor.csv (the monitor table as the lake serves it), monitor_case_mix.csv and
    monitor_decisions.csv (the decision record of a first run) of the exports' monitor parts, and the
    monitor's entry of `summary`."""
    from autheval.reporting.outputs import csv_text
    from autheval.sites.monitor import check_monitors, pooled_monitor

    check_monitors(exports, protocol)
    monitoring, decided = pooled_monitor(exports, protocol)
    summary["monitor"] = {
        "protocol_version": protocol.version,
        "protocol_sha256": protocol.sha256,
        "exports": {e.site: e.manifest_sha256 for e in sorted(exports, key=lambda e: e.site)},
        "rows": decided.monitor.num_rows,
        "alerts": [a["alert_id"] for a in monitoring.alerts],
    }
    return {
        "monitor.csv": csv_text(decided.monitor.column_names, decided.monitor.to_pylist()),
        "monitor_case_mix.csv": csv_text(monitoring.case_mix.column_names, monitoring.case_mix.to_pylist()),
        "monitor_decisions.csv": csv_text(decided.record.column_names, decided.record.to_pylist()),
    }


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `pool` to the `autheval` parser."""
    p = add_command(subparsers, "pool", POOL_HELP, POOL_DESCRIPTION, run=cmd_pool)
    p.add_argument(
        "--export",
        action="append",
        required=True,
        type=path_flag,
        metavar="DIR",
        help="a site's export folder (repeat for each site)",
    )
    p.add_argument(
        "--trust", required=True, type=path_flag, metavar="DIR", help="folder of registered keys, <site>.pub each"
    )
    add_hub_seed_flag(p, "an export of another seed is refused; with --scheme, that scheme's seed")
    p.add_argument(
        "--scheme",
        choices=("reference", "evaluator"),
        help="an exact scheme over per-cluster exports (every site --per-cluster): evaluate's intervals of all "
        "the sites' records (default: the exports' poisson_by_site replicate sums)",
    )
    p.add_argument("--reps", type=int, metavar="B", help="replicates of --scheme (default 5000)")
    add_hub_declarations(
        p,
        "the acceptance protocol the hub declares: pool the exports' monitor parts (each made under it) into "
        "monitor.csv, monitor_case_mix.csv and monitor_decisions.csv",
    )
    p.add_argument(
        "--output-dir",
        type=path_flag,
        default=Path("."),
        metavar="DIR",
        help="folder for the result files (default: the current folder)",
    )
