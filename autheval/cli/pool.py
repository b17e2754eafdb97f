"""`autheval pool`: the hub pools signed site exports (autheval.sites.pool) into estimates.csv,
heterogeneity.csv and summary.json. The heavy imports happen only when the command runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from autheval.cli.flags import add_command, check_seed, path_flag
from autheval.cli.site import add_hub_seed_flag

POOL_HELP = "pool signed site exports into the estimates one lake of their records would give"
POOL_DESCRIPTION = """\
Pool signed site exports (`autheval site export`): every export must be signed by the key registered in
--trust for its site (<site>.pub), unaltered, well formed, no replay, one per site, of the same software,
seed and replicates. Writes estimates.csv
(evaluate's columns: poisson bootstrap and delta-method rows, pooled and per site), heterogeneity.csv
(Cochran's Q and I^2 of Delta_authority across sites) and summary.json to --output-dir."""


def cmd_pool(args) -> int:
    from autheval.errors import RecordError
    from autheval.estimation.study import ESTIMATE_COLUMNS
    from autheval.reporting.outputs import csv_text, write_files
    from autheval.sites.pool import check_exports, pool, read_export
    from autheval.sites.signing import trusted_keys

    check_seed(args.seed)
    out = Path(args.output_dir).resolve()
    for folder in [*args.export, args.trust]:
        f = Path(folder).resolve()
        if out == f or f in out.parents:
            raise RecordError("--output-dir", None, f"{args.output_dir} is or lies inside the input {folder}")
    trusted = trusted_keys(args.trust)
    exports = [read_export(folder, trusted) for folder in args.export]
    check_exports(exports, args.seed)
    rows, summary = pool(exports)
    het = [{"analysis": a, **h} for a, entry in summary["analyses"].items() for h in entry["heterogeneity"]]
    files = {
        "estimates.csv": csv_text(ESTIMATE_COLUMNS, rows),
        "heterogeneity.csv": csv_text(("analysis", "unit", "metric", "sites", "cochran_q", "df", "i_squared"), het),
        "summary.json": json.dumps(summary, indent=2, sort_keys=True) + "\n",
    }
    for path in write_files(args.output_dir, files):
        print(path)
    return 0


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
    add_hub_seed_flag(p, "an export of another seed is refused")
    p.add_argument(
        "--output-dir",
        type=path_flag,
        default=Path("."),
        metavar="DIR",
        help="folder for the result files (default: the current folder)",
    )
