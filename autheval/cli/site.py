"""`autheval site keygen` (a site's Ed25519 key pair) and `autheval site export` (a site's signed export of
sufficient statistics: autheval.sites.export). The heavy imports happen only when a command runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from autheval.cli.flags import add_command, check_seed, path_flag

SITE_HELP = "a site that keeps its records: make its key, export its sufficient statistics"
SITE_DESCRIPTION = """\
A site evaluates its own records and exports sufficient statistics only (totals, centred second moments
over clusters and poisson bootstrap replicate sums; never a case id, a cluster id or a per-cluster row),
signed with its Ed25519 key; a hub pools the exports with `autheval pool`."""
KEYGEN_HELP = "write a new key pair: site.key (private, mode 0600) and site.pub (register it with the hub)"
EXPORT_HELP = "export a record's sufficient statistics into a new folder, signed with --key"


def cmd_keygen(args) -> int:
    from autheval.sites.signing import keygen

    for path in keygen(args.out):
        print(path)
    return 0


def _count(value: int, flag: str) -> int:
    from autheval.errors import RecordError

    if not 0 <= value <= 1_000_000_000:
        raise RecordError(flag, None, f"must be a whole number from 0 to 10^9, got {value}")
    return value


def cmd_export(args) -> int:
    from autheval.cli.evaluate import _input_text
    from autheval.errors import RecordError
    from autheval.estimation.estimators import DEFAULT_SEEDS, check_reps
    from autheval.records.read import read_records
    from autheval.sites.export import check_out_folder, write_export
    from autheval.sites.names import check_site_name
    from autheval.sites.signing import load_private_key

    check_site_name(args.site)
    check_seed(args.seed)
    try:
        reps = check_reps(args.replicates)
    except RecordError as err:  # check_reps names evaluate's --reps; this command's flag is --replicates
        raise RecordError("--replicates", None, err.rule, err.example) from None
    _count(args.min_clusters, "--min-clusters")
    _count(args.min_changed_clusters, "--min-changed-clusters")
    key = load_private_key(args.key) if args.key is not None else None
    inputs = [("--input", Path(_input_text(args.input)))] if "://" not in str(args.input) else []
    if args.key is not None:
        inputs.append(("--key", args.key))
    check_out_folder(args.out, inputs)
    records = read_records(_input_text(args.input))
    seed = DEFAULT_SEEDS["poisson"] if args.seed is None else args.seed
    for path in write_export(
        records, args.out, args.site, seed, reps, args.min_clusters, args.min_changed_clusters, key
    ):
        print(path)
    if key is None:
        from autheval.records.warnings import warn

        warn(f"{args.out} is unsigned (no --key): a hub refuses it; sign with autheval site keygen and --key")
    return 0


def add_hub_seed_flag(parser: argparse.ArgumentParser, default: str) -> None:
    """`--seed`: the seed of the poisson bootstrap the hub declares; a site exports with it and the hub
    refuses an export of another."""
    parser.add_argument("--seed", type=int, metavar="S", help=f"the hub's declared poisson bootstrap seed ({default})")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `site keygen` and `site export` to the `autheval` parser."""
    from autheval.cli.evaluate import record_input_flag

    p = add_command(subparsers, "site", SITE_HELP, SITE_DESCRIPTION)
    sub = p.add_subparsers(dest="site_command", required=True)
    k = add_command(sub, "keygen", KEYGEN_HELP, run=cmd_keygen)
    k.add_argument("--out", required=True, type=path_flag, metavar="DIR", help="folder for site.key and site.pub")
    e = add_command(sub, "export", EXPORT_HELP, run=cmd_export)
    e.add_argument(
        "--input",
        required=True,
        type=record_input_flag,
        metavar="PATH",
        help="the site's records: any input `autheval evaluate` accepts",
    )
    e.add_argument("--site", required=True, metavar="NAME", help="the site's name (letters, digits, _ . -)")
    e.add_argument("--out", required=True, type=path_flag, metavar="DIR", help="the export's folder, new or empty")
    e.add_argument("--key", type=path_flag, metavar="KEYFILE", help="site.key of `site keygen`")
    add_hub_seed_flag(e, "default 20260711")
    e.add_argument("--replicates", type=int, default=5000, metavar="B", help="bootstrap replicates (default 5000)")
    e.add_argument(
        "--min-clusters", type=int, default=5, metavar="K", help="suppress an analysis with fewer clusters (default 5)"
    )
    e.add_argument(
        "--min-changed-clusters",
        type=int,
        default=5,
        metavar="K",
        help="suppress an analysis with fewer clusters holding a changed case (default 5)",
    )
