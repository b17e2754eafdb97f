"""`autheval site keygen` (a site's Ed25519 key pair) and `autheval site export` (a site's signed export of
sufficient statistics: autheval.sites.export). The heavy imports happen only when a command runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from autheval.cli.flags import add_command, add_lake_flag, check_seed, path_flag

SITE_HELP = "a site that keeps its records: make its key, export its sufficient statistics"
SITE_DESCRIPTION = """\
A site evaluates its own records and exports sufficient statistics only (totals, centred second moments
over clusters and poisson_by_site bootstrap replicate sums; never a case id, a cluster id or a per-cluster
row), signed with its Ed25519 key; a hub pools the exports with `autheval pool` (docs/sites.md). With
--monitor, the monitor's per-period sums of its deployment logs too; with --per-cluster (opt-in, weaker
protection), one row per cluster under salted id hashes for the hub's exact schemes. `site land` is the hub's
side in a lake: exports verified against <lake>/trusted_keys/<site>.pub land as logs do and pool into the
lake's estimates, intervals, contrasts, heterogeneity and monitor tables, per site beside pooled."""
KEYGEN_HELP = "write a new key pair: site.key (private, mode 0600) and site.pub (register it with the hub)"
EXPORT_HELP = "export a record's sufficient statistics into a new folder, signed with --key"
EXPORT_RULES_HELP = (
    "the declared local rule file (autheval rules) the site scored its records under: its version and SHA-256 "
    "enter the signed manifest, and a hub declaring other rules refuses the export"
)
HUB_RULES_HELP = (
    "the declared local rule file the hub requires: an export scored under other rules, or declaring none, is "
    "refused (without it, the sites must declare the same rules, or none)"
)
LAND_HELP = "a hub lake: land signed exports (verified against <lake>/trusted_keys) and pool them into its tables"


def cmd_keygen(args) -> int:
    from autheval.sites.signing import keygen

    for path in keygen(args.out):
        print(path)
    return 0


def cmd_land(args) -> int:
    from autheval.sites.export import rules_entry
    from dagster_project.site_land import site_land

    rules = rules_entry(args.rules) if args.rules is not None else None
    return site_land(args.lake, args.export or [], args.protocol, rules=rules)


def _count(value: int, flag: str) -> int:
    from autheval.errors import RecordError

    if not 0 <= value <= 1_000_000_000:
        raise RecordError(flag, None, f"must be a whole number from 0 to 10^9, got {value}")
    return value


def cmd_export(args) -> int:
    from autheval.cli.evaluate import _input_text, _parse_arm
    from autheval.errors import RecordError
    from autheval.estimation.estimators import DEFAULT_SEEDS, check_reps
    from autheval.records.read import read_records
    from autheval.sites.export import SCHEME, check_out_folder, rules_entry, write_export
    from autheval.sites.names import check_analysis_names, check_site_name
    from autheval.sites.signing import load_private_key

    check_site_name(args.site)
    check_seed(args.seed)
    if args.secret_seed and args.seed is not None:
        raise RecordError("--secret-seed", None, "draws the site's own seed: give it or --seed, not both")
    if args.input is not None and args.arm:
        raise RecordError("--input", None, "give the site's records: --input PATH, or --arm NAME=PATH for each arm")
    if args.input is None and not args.arm and args.monitor is None:
        raise RecordError(
            "--input",
            None,
            "give the site's records (--input PATH, or --arm NAME=PATH each) or its logs (--monitor DIR)",
        )
    if args.per_cluster != (args.salt_file is not None):
        raise RecordError(
            "--per-cluster",
            None,
            "hashes cluster ids with the site's salt: give both --per-cluster and --salt-file",
        )
    if args.per_cluster and args.input is None and not args.arm:
        raise RecordError("--per-cluster", None, "exports the clusters of the site's records: give --input or --arm")
    if args.protocol is not None and args.monitor is None:
        raise RecordError("--protocol", None, "is the monitor's protocol: give the logs it monitors with --monitor DIR")
    if args.contrast and not args.arm:
        raise RecordError("--contrast", None, "contrasts two arms: give them with --arm NAME=PATH")
    try:
        reps = check_reps(args.replicates)
    except RecordError as err:  # check_reps names evaluate's --reps; this command's flag is --replicates
        raise RecordError("--replicates", None, err.rule, err.example) from None
    _count(args.min_clusters, "--min-clusters")
    _count(args.min_changed_clusters, "--min-changed-clusters")
    key = load_private_key(args.key) if args.key is not None else None
    rules = rules_entry(args.rules) if args.rules is not None else None
    salt = None
    if args.salt_file is not None:
        from autheval.sites.clusters import read_salt

        salt = read_salt(args.salt_file)
    if args.arm:
        arms = [_parse_arm(a) for a in args.arm]
        names = check_analysis_names([("--arm", name) for name, _ in arms])
    elif args.input is not None:
        from autheval.records.read import default_analysis

        arms = [(default_analysis(args.input), args.input)]
        names = check_analysis_names([("--input", arms[0][0])])
    else:
        arms, names = [], []
    contrasts = _site_contrasts(args.contrast, names)
    inputs = [
        ("--input" if args.input is not None else f"--arm {name}", Path(_input_text(path))) for name, path in arms
    ]
    inputs = [(flag, path) for flag, path in inputs if "://" not in str(path)]
    if args.key is not None:
        inputs.append(("--key", args.key))
    if args.monitor is not None:
        inputs.append(("--monitor", args.monitor))
    check_out_folder(args.out, inputs)
    monitor = None
    if args.monitor is not None:
        from autheval.monitoring.protocol import load_protocol
        from autheval.sites.monitor import monitor_part

        protocol = load_protocol(args.protocol)
        part, logs = monitor_part(args.monitor, args.site, protocol, reps, args.min_clusters, args.min_changed_clusters)
        entry = {"protocol_version": protocol.version, "protocol_sha256": protocol.sha256, "reps": reps, "logs": logs}
        monitor = (part, entry)
    recordsets = [read_records(_input_text(path), analysis=name) for name, path in arms]
    seed = None if args.secret_seed else DEFAULT_SEEDS[SCHEME] if args.seed is None else args.seed
    for path in write_export(
        recordsets,
        args.out,
        args.site,
        seed,
        reps,
        args.min_clusters,
        args.min_changed_clusters,
        key,
        contrasts,
        monitor,
        salt,
        rules,
    ):
        print(path)
    if key is None:
        from autheval.records.warnings import warn

        warn(f"{args.out} is unsigned (no --key): a hub refuses it; sign with autheval site keygen and --key")
    return 0


def _site_contrasts(texts: list[str] | None, names: list[str]) -> list[tuple[str, str]]:
    """The paired contrasts ((arm a, arm b)) of `--contrast "A minus B"` each, or every later arm minus the
    first (as compare pairs them); a contrast given twice would be pooled twice, an arm minus itself is 0."""
    from autheval.cli.evaluate import _parse_contrast
    from autheval.errors import RecordError

    if not texts:
        return [(name, names[0]) for name in names[1:]]
    contrasts: list[tuple[str, str]] = []
    for text in texts:
        a, b = _parse_contrast(text)
        if a == b:
            raise RecordError("--contrast", None, "contrasts an arm with itself: name two arms", f"got {text!r}")
        if (a, b) in contrasts:
            raise RecordError("--contrast", None, "given twice", f"{a} minus {b}")
        contrasts.append((a, b))
    return contrasts


def add_hub_seed_flag(parser: argparse.ArgumentParser, default: str) -> None:
    """`--seed`: the seed of the poisson bootstrap the hub declares; a site exports with it and the hub
    refuses an export of another."""
    parser.add_argument("--seed", type=int, metavar="S", help=f"the hub's declared poisson bootstrap seed ({default})")


def add_hub_declarations(parser: argparse.ArgumentParser, protocol_help: str) -> None:
    """What a hub declares and holds every export to: `--protocol` (monitor parts) and `--rules`."""
    parser.add_argument("--protocol", type=path_flag, metavar="FILE", help=protocol_help)
    parser.add_argument("--rules", type=path_flag, metavar="FILE", help=HUB_RULES_HELP)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `site keygen`, `site export` and `site land` to the `autheval` parser."""
    from autheval.cli.evaluate import record_input_flag

    p = add_command(subparsers, "site", SITE_HELP, SITE_DESCRIPTION)
    sub = p.add_subparsers(dest="site_command", required=True)
    k = add_command(sub, "keygen", KEYGEN_HELP, run=cmd_keygen)
    k.add_argument("--out", required=True, type=path_flag, metavar="DIR", help="folder for site.key and site.pub")
    land = add_command(sub, "land", LAND_HELP, run=cmd_land)
    add_lake_flag(land)
    land.add_argument(
        "--export",
        action="append",
        type=path_flag,
        metavar="DIR",
        help="a site's export folder: verified, then copied into <lake>/landing/exports/ (repeatable); what "
        "already waits there lands too",
    )
    add_hub_declarations(
        land,
        "the acceptance protocol the hub lake declares (default $AUTHEVAL_PROTOCOL, else the packaged one): "
        "monitor parts made under another are refused",
    )
    e = add_command(sub, "export", EXPORT_HELP, run=cmd_export)
    e.add_argument(
        "--input",
        type=record_input_flag,
        metavar="PATH",
        help="the site's records: any input `autheval evaluate` accepts (or --arm)",
    )
    e.add_argument(
        "--arm",
        action="append",
        metavar="NAME=PATH",
        help="a proposal mechanism's records on the site's clusters (repeat; as `compare --arm`): each an analysis",
    )
    e.add_argument(
        "--contrast",
        action="append",
        metavar='"A minus B"',
        help="a paired contrast of two arms on identical clusters (default: every later arm minus the first)",
    )
    e.add_argument(
        "--monitor",
        type=path_flag,
        metavar="DIR",
        help="the site's deployment logs (the files its lake would land): export the monitor's per-period sums too",
    )
    e.add_argument(
        "--protocol",
        type=path_flag,
        metavar="FILE",
        help="the monitor's acceptance protocol (default: the packaged one); the hub must declare the same",
    )
    e.add_argument("--rules", type=path_flag, metavar="FILE", help=EXPORT_RULES_HELP)
    e.add_argument(
        "--per-cluster",
        action="store_true",
        help="opt in: also export one row per cluster (its sums; its id as HMAC-SHA256 under --salt-file), so the "
        "hub can run the exact reference and evaluator schemes; weaker disclosure protection (docs/sites.md)",
    )
    e.add_argument(
        "--salt-file",
        type=path_flag,
        metavar="FILE",
        help="the site's secret salt for --per-cluster (at least 16 random bytes, mode 0600; kept at the site)",
    )
    e.add_argument("--site", required=True, metavar="NAME", help="the site's name (letters, digits, _ . -)")
    e.add_argument("--out", required=True, type=path_flag, metavar="DIR", help="the export's folder, new or empty")
    e.add_argument("--key", type=path_flag, metavar="KEYFILE", help="site.key of `site keygen`")
    add_hub_seed_flag(e, "default 20260711")
    e.add_argument(
        "--secret-seed",
        action="store_true",
        help="weight the replicates by a seed drawn here and kept nowhere (scheme poisson_by_site_secret): the "
        "hub cannot solve replicate sums for per-cluster sums, and nobody can reproduce the replicates",
    )
    e.add_argument(
        "--replicates",
        type=int,
        default=5000,
        metavar="B",
        help="bootstrap replicates (default 5000; under the hub's seed fewer than each analysis's clusters)",
    )
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
