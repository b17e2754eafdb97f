"""The `autheval` command line. Heavy packages (Dagster, torch) are imported only by the commands
that need them, so `autheval evaluate` and `autheval compare` stay quick."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autheval.errors import RecordError


def _schemes():
    from autheval.estimators import SCHEMES

    return SCHEMES


def _add_bootstrap_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scheme", choices=_schemes(), default=None,
                        help="bootstrap scheme (default: reference for case traces, evaluator for logs)")
    parser.add_argument("--reps", type=int, default=5000, help="bootstrap replicates (default 5000)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed (default: the scheme's: reference/poisson 20260711, evaluator 20260710)")
    parser.add_argument("--lower", type=float, default=0.025, help="lower quantile (default 0.025)")
    parser.add_argument("--upper", type=float, default=0.975, help="upper quantile (default 0.975)")
    parser.add_argument("--output-dir", type=Path, default=Path("."), help="where results are written")


def _default_scheme(recordsets) -> str:
    return "reference" if all(r.schema == "trace" for r in recordsets) else "evaluator"


def cmd_evaluate(args) -> int:
    from autheval.estimators import estimate
    from autheval.outputs import write_evaluate_outputs
    from autheval.records import read_records

    records = read_records(args.input)
    scheme = args.scheme or _default_scheme([records])
    result = estimate([records], scheme=scheme, reps=args.reps, seed=args.seed,
                      quantiles=(args.lower, args.upper))
    for path in write_evaluate_outputs(result, records.analysis, args.output_dir):
        print(path)
    return 0


def _parse_arm(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise RecordError("--arm", None, f"expected NAME=PATH, got {text!r}")
    return name, path


def _parse_contrast(text: str) -> tuple[str, str]:
    a, sep, b = text.partition(" minus ")
    if not sep:
        raise RecordError("--contrast", None, f"expected \"A minus B\", got {text!r}")
    return a.strip(), b.strip()


def cmd_compare(args) -> int:
    from autheval.estimators import estimate
    from autheval.outputs import write_compare_outputs
    from autheval.records import read_records

    arms = [_parse_arm(a) for a in args.arm]
    records = [read_records(path, analysis=name) for name, path in arms]
    if args.contrast:
        contrasts = [_parse_contrast(c) for c in args.contrast]
    else:  # every later arm against the first
        contrasts = [(name, arms[0][0]) for name, _ in arms[1:]]
    scheme = args.scheme or _default_scheme(records)
    result = estimate(records, scheme=scheme, reps=args.reps, seed=args.seed,
                      quantiles=(args.lower, args.upper), contrasts=contrasts)
    for path in write_compare_outputs(result, args.output_dir):
        print(path)
    return 0


def cmd_demo(args) -> int:
    import pyarrow as pa

    from autheval import study
    from autheval.tables import render
    from warehouse.catalog import publish_catalog
    from warehouse.lake import Lake

    lake = Lake(args.lake)
    print(f"[1/3] review regimes of the MedGemma readout ({args.reps} replicates)", flush=True)
    regimes = study.regime_study(reps=args.reps)
    print(f"[2/3] proposal mechanisms under capacity + paired contrast", flush=True)
    mechanisms = study.mechanism_study(reps=args.reps)
    print(f"[3/3] writing the lake at {lake.root}", flush=True)
    lake.write("estimates", pa.concat_tables([study.estimates_table(regimes), study.estimates_table(mechanisms)]))
    lake.write("regime_summary", study.proposal_table(regimes).rename_columns(
        ["analysis", *study.proposal_table(regimes).column_names[1:]]))
    lake.write("proposal_dependence", study.proposal_table(mechanisms))
    lake.write("contrasts", study.contrasts_table(mechanisms))
    publish_catalog(lake)
    print()
    print(render(lake.read("regime_summary"), title="Review regimes (MedGemma readout), Delta = J_auth - J"))
    print()
    print(render(lake.read("proposal_dependence"), title="Proposal mechanisms under capacity"))
    print()
    print(render(lake.read("contrasts").select(["contrast", "unit", "difference", "ci_lower", "ci_upper", "excludes_zero"]),
                 title="Paired contrast on identical clusters"))
    return 0


def cmd_query(args) -> int:
    from autheval.tables import render
    from warehouse.catalog import query
    from warehouse.lake import Lake
    import duckdb

    try:
        table = query(Lake(args.lake), args.sql)
    except (duckdb.Error, FileNotFoundError) as err:
        print(f"autheval: error: {str(err).strip().splitlines()[0]}", file=sys.stderr)
        return 2
    print(render(table, args.format))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autheval", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("evaluate", help="evaluate one record file (AuthEval log or case trace)")
    p.add_argument("--input", required=True, type=Path, help="CSV or Parquet record file")
    _add_bootstrap_flags(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("compare", help="compare proposal mechanisms on identical clusters")
    p.add_argument("--arm", action="append", required=True, metavar="NAME=PATH",
                   help="one arm (repeat); the first is the baseline of the default contrasts")
    p.add_argument("--contrast", action="append", metavar='"A minus B"',
                   help="a paired contrast (repeat); default: each later arm minus the first")
    _add_bootstrap_flags(p)
    p.set_defaults(func=cmd_compare)

    from warehouse.lake import DEFAULT_LAKE

    p = sub.add_parser("demo", help="run the reference study into the lake and print its tables")
    p.add_argument("--source", choices=["reference"], default="reference",
                   help="embedded data to run on (default: the published reference study)")
    p.add_argument("--lake", type=Path, default=DEFAULT_LAKE, help=f"lake folder (default {DEFAULT_LAKE})")
    p.add_argument("--reps", type=int, default=5000, help="bootstrap replicates (default 5000)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("query", help="read-only SQL over the lake's catalog")
    p.add_argument("sql", help="a SQL query, e.g. \"select * from estimates\"")
    p.add_argument("--lake", type=Path, default=DEFAULT_LAKE, help=f"lake folder (default {DEFAULT_LAKE})")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.set_defaults(func=cmd_query)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except RecordError as err:
        print(f"autheval: error: {err}", file=sys.stderr)
        return err.exit_code
    except ValueError as err:
        print(f"autheval: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
