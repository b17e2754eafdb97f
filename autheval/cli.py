"""The `autheval` command line. Heavy packages (Dagster, torch) are imported only by the commands
that need them, so `autheval evaluate` and `autheval compare` stay quick."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autheval.errors import RecordError
from warehouse.sql import load_sql


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

    from autheval.report import headline
    from autheval.tables import render
    from dagster_project.demo import RAW_STAGES, REFERENCE_STAGES, run_stages
    from dagster_project.resources import SourceResource
    from warehouse.lake import DEFAULT_LAKE, Lake

    lake = Lake(args.lake)
    if args.source == "reference":
        source, stages, extra = SourceResource(kind="reference"), REFERENCE_STAGES, ()
    else:
        input_dir = args.input
        if args.source == "synthetic" and input_dir is None:
            from autheval.raw.synth import synth_cohort

            input_dir = lake.root / "synthetic_cohort"
            print(f"Writing a synthetic ISIC-shaped cohort of {args.n} images to {input_dir}", flush=True)
            synth_cohort(args.n, input_dir, overwrite=True)
        if input_dir is None:
            raise RecordError("--input", None, "--source isic2019 needs --input DIR (the official ISIC 2019 files)")
        source = SourceResource(kind=args.source, input_dir=str(Path(input_dir).resolve()),
                                freeze=str(args.freeze.resolve()) if args.freeze else "")
        stages, extra = RAW_STAGES, ("catalog",)
    print(f"Materializing the {args.source} source into {lake.root} (Dagster, in-process)", flush=True)
    checks = run_stages(lake.root, stages, out=lambda line: print(line, flush=True), source=source, extra=extra)
    failed = sorted(name for name, passed in checks.items() if not passed)
    print(f"asset checks: {len(checks) - len(failed)} of {len(checks)} passed" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    if args.source != "reference":
        from warehouse.catalog import query

        print()
        print(render(query(lake, load_sql("raw_path_summary")), title=f"Raw path on {source.input_dir}"))
        return 1 if failed else 0
    summary = lake.read("study_summary").to_pylist()
    for study, title in (("regimes", "Review regimes of the MedGemma readout"),
                         ("mechanisms", "Proposal mechanisms under the capacity ceiling")):
        rows = [{k: v for k, v in headline(r).items() if k != "study"} for r in summary if r["study"] == study]
        print()
        print(render(pa.Table.from_pylist(rows), title=f"{title}: Delta = J_auth - J = p * delta"))
    print()
    print(render(lake.read("contrasts").select(["contrast", "unit", "difference", "ci_lower", "ci_upper", "excludes_zero"]),
                 title="Paired contrast on identical clusters"))
    print(f"\nreport: {lake.root / 'reports' / 'report.html'}")
    lake_flag = "" if lake.root == Lake(DEFAULT_LAKE).root else f" --lake {args.lake}"
    print(f"query:  autheval query \"select analysis, unit, metric, estimate, ci_lower, ci_upper from estimates\"{lake_flag}")
    return 1 if failed else 0


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


def cmd_ui(args) -> int:
    """Serve the Dagster UI for this project on 127.0.0.1 (Ctrl-C stops it)."""
    import os

    from warehouse.lake import Lake

    lake = Lake(args.lake)
    home = Path(os.environ.get("DAGSTER_HOME") or lake.root / ".dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text("telemetry:\n  enabled: false\nconcurrency:\n  pools:\n    default_limit: 1\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "AUTHEVAL_LAKE": str(lake.root)}
    dagster = Path(sys.executable).with_name("dagster")
    command = [str(dagster), "dev", "-m", "dagster_project", "-h", "127.0.0.1", "-p", str(args.port)]
    print(f"Dagster UI on http://127.0.0.1:{args.port} (lake {lake.root}); Ctrl-C stops it", flush=True)
    os.execve(command[0], command, env)


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
    p.add_argument("--source", choices=["reference", "synthetic", "isic2019"], default="reference",
                   help="reference: the published study (embedded); synthetic: a generated ISIC-shaped cohort "
                        "through the raw path; isic2019: the official files in --input")
    p.add_argument("--input", type=Path, help="cohort folder in the ISIC 2019 layout (synthetic or isic2019)")
    p.add_argument("--freeze", type=Path, help="a split_freeze file to validate and use (raw sources)")
    p.add_argument("--n", type=int, default=200, help="synthetic cohort size (default 200)")
    p.add_argument("--lake", type=Path, default=DEFAULT_LAKE, help=f"lake folder (default {DEFAULT_LAKE})")
    p.add_argument("--reps", type=int, default=5000, help="bootstrap replicates (default 5000)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("query", help="read-only SQL over the lake's catalog")
    p.add_argument("sql", help="a SQL query, e.g. \"select * from estimates\"")
    p.add_argument("--lake", type=Path, default=DEFAULT_LAKE, help=f"lake folder (default {DEFAULT_LAKE})")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.set_defaults(func=cmd_query)

    from autheval.raw.cli import register as register_raw

    register_raw(sub)

    p = sub.add_parser("ui", help="the Dagster UI for this project on 127.0.0.1")
    p.add_argument("--port", type=int, default=3000, help="port (default 3000)")
    p.add_argument("--lake", type=Path, default=DEFAULT_LAKE, help=f"lake folder (default {DEFAULT_LAKE})")
    p.set_defaults(func=cmd_ui)
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
