"""`autheval evaluate` (one record file) and `autheval compare` (proposal mechanisms on identical
clusters): the bootstrap flags they share, their checks, receipts and progress lines.

autheval/cli/main.py calls register(subparsers); the estimators, DuckDB and numpy are imported only when a
command runs. _UnneededImports is what autheval/cli/main.py installs in the command-line process of either.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from autheval.cli.common import _progress
from autheval.cli.flags import SEED_MAX, add_command, check_seed, path_flag
from autheval.errors import RecordError
from autheval.vocabulary import SCHEMES, SITE_KEYED_SCHEMES


def _add_bootstrap_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scheme",
        choices=(*SCHEMES, *SITE_KEYED_SCHEMES),
        help="how clusters are resampled: reference (AuthEval's analysis scheme), evaluator "
        "(AuthEval's log evaluator), poisson (Poisson(1) weights, for very large logs) or "
        "poisson_by_site (the poisson weights keyed by site, cluster ids <site>:<id>: the replicates a hub "
        "pools from site exports); default: reference for case traces, evaluator for logs",
    )
    parser.add_argument("--reps", type=int, default=5000, metavar="N", help="bootstrap replicates (default 5000)")
    parser.add_argument(
        "--seed",
        type=int,
        metavar="S",
        help=f"random seed, an integer from 0 to {SEED_MAX} (2^62 - 1) for every scheme "
        "(default: the scheme's own, 20260711 for reference and the poisson schemes, 20260710 for "
        "evaluator)",
    )
    parser.add_argument(
        "--lower", type=float, default=0.025, metavar="Q", help="lower quantile of the interval (default 0.025)"
    )
    parser.add_argument(
        "--upper", type=float, default=0.975, metavar="Q", help="upper quantile of the interval (default 0.975)"
    )
    parser.add_argument(
        "--engine",
        default="duckdb",
        metavar="NAME",
        help="where the estimators run: duckdb (in this process, the default) or spark (a "
        "local Spark session bound to 127.0.0.1, or the cluster of --spark-master; needs "
        "the spark extra and Java 17); the numbers agree to 1e-12",
    )
    parser.add_argument(
        "--spark-master",
        metavar="URL",
        help="with --engine spark: an existing cluster (spark://HOST:7077, sc://HOST:15002, "
        "yarn, k8s://URL); default local[N] on this machine's cores",
    )
    parser.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="print no progress lines (by default a run longer than a few seconds reports rows "
        "read and bootstrap replicates done on stderr, never on stdout)",
    )
    parser.add_argument(
        "--output-dir",
        type=path_flag,
        default=Path("."),
        metavar="DIR",
        help="folder for the result files, created if missing (default: the current folder); "
        "all files are replaced together or none is",
    )


def _check_bootstrap_flags(args, inputs: list[tuple[str, str | Path]], files: tuple[str, ...]) -> None:
    """Fail before any work, in one line naming the flag: also when a result file would replace one of
    the `inputs` (flag, path)."""
    from autheval.cli.flags import check_not_an_input, check_output_dir_apart
    from autheval.estimation.estimators import check_reps
    from autheval.reporting.outputs import check_output_dir

    check_seed(args.seed)
    check_reps(args.reps)
    from warehouse.engine import engine_config

    engine_config(args.engine, args.spark_master)  # unknown engine, Spark extra, Java, master: one line
    check_output_dir_apart(args.output_dir, inputs, "--output-dir")
    check_output_dir(args.output_dir)
    check_not_an_input([args.output_dir / name for name in files], inputs, "--output-dir")


def _engine(args, scheme: str):
    """The engine of --engine/--spark-master as a context: None for duckdb (the estimators run in this
    process), else a started engine, stopped when the block ends."""
    from contextlib import nullcontext

    if args.engine == "duckdb":
        return nullcontext(None)
    from autheval.estimation.engine_estimates import check_engine_scheme
    from warehouse.engine import connect_engine, engine_config

    check_engine_scheme(scheme)  # before a JVM starts
    return connect_engine(engine_config(args.engine, args.spark_master))


def _estimate_by_flags(args, recordsets, engine=None, **options):
    """`estimate` of `recordsets` under the bootstrap flags (scheme or its default, reps, seed, quantiles),
    with progress on stderr: what evaluate, --by and compare (paired and unpaired) run."""
    from autheval.estimation.estimators import estimate

    return estimate(
        recordsets,
        scheme=args.scheme or _default_scheme(recordsets),
        reps=args.reps,
        seed=args.seed,
        quantiles=(args.lower, args.upper),
        engine=engine,
        progress=_bootstrap_progress(args),
        **options,
    )


def _default_scheme(recordsets) -> str:
    return "reference" if all(r.schema == "trace" for r in recordsets) else "evaluator"


def cmd_evaluate(args) -> int:
    from autheval.records.read import read_records
    from autheval.reporting.outputs import EVALUATE_FILES, write_evaluate_outputs
    from autheval.reporting.receipt import RECEIPT

    if getattr(args, "by", None):
        return _evaluate_by(args)
    _check_bootstrap_flags(args, [("--input", args.input)], (*EVALUATE_FILES, RECEIPT))
    records = _read_with_progress(read_records, args, args.input)
    with _engine(args, args.scheme or _default_scheme([records])) as engine:
        result = _estimate_by_flags(args, [records], engine)
    receipt = _bootstrap_receipt(args, "evaluate", result, [("--input", args.input)])
    for path in write_evaluate_outputs(result, records.analysis, args.output_dir, receipt):
        print(path)
    return 0


def _column_list(flag: str, text: str) -> tuple[str, ...]:
    """`--by site,model_version`: column names, each named once, none empty."""
    names = tuple(text.split(","))
    for name in names:
        if not name or name != name.strip():
            raise RecordError(flag, None, f"expected column names joined by ',' (no spaces, none empty), got {text!r}")
        if names.count(name) > 1:
            raise RecordError(flag, name, f"the column is named twice in {text!r}")
    return names


def _input_table(path):
    """The rows of a record input as one Arrow table, its columns as the input names them (a CSV's as
    text): what --by and --strata split. A dataset's files are read in name order."""
    import pyarrow as pa

    from autheval.io import is_dataset_path, read_table

    text = _input_text(path)
    if not is_dataset_path(text):
        return read_table(text)
    from autheval.records.datasets import open_dataset

    dataset, _, _ = open_dataset(text)
    if dataset.kind == "csv":
        return pa.concat_tables([read_table(f) for f in dataset.files])
    import pyarrow.parquet as pq

    return pa.concat_tables([pq.read_table(name) for name in dataset.names])


def _split_records(path, columns: tuple[str, ...], flag: str, analysis: str | None = None, con=None):
    """[(group key, RecordSet)] of a record input split by the values of `columns` (sorted by value):
    each group validated as a record of its own, its analysis `<analysis> / col=value,...` or `col=value,...`."""
    from autheval.estimation.unpaired import group_label, split_groups
    from autheval.io import table_sha256
    from autheval.records.read import records_from_table

    source = _input_text(path)
    table = _input_table(path)
    groups = split_groups(table, columns, source, flag)
    out = []
    for key, rows in groups.items():
        label = group_label(columns, key)
        name = f"{analysis} / {label}" if analysis else label
        records = records_from_table(rows, source, name, table_sha256(rows), used=columns, con=con)
        out.append((key, replace(records, source=_source_label(path))))
    return table, out


def _evaluate_by(args) -> int:
    """`evaluate --by COLS`: one analysis per combination of the columns' values; estimates.csv (each row
    labelled by its group: analysis `col=value,...` and a by_<col> column per column) and the receipt."""
    from autheval.reporting.outputs import BY_FILES, write_by_outputs
    from autheval.reporting.receipt import RECEIPT

    columns = _column_list("--by", args.by)
    _check_bootstrap_flags(args, [("--input", args.input)], (*BY_FILES, RECEIPT))
    _, groups = _split_records(args.input, columns, "--by")
    recordsets = [records for _, records in groups]
    with _engine(args, args.scheme or _default_scheme(recordsets)) as engine:
        result = _estimate_by_flags(args, recordsets, engine)
    receipt = _bootstrap_receipt(args, "evaluate", result, [("--input", args.input)])
    by = {records.analysis: dict(zip(columns, key)) for key, records in groups}
    for path in write_by_outputs(result, columns, by, args.output_dir, receipt):
        print(path)
    return 0


def _bootstrap_receipt(args, command: str, result, inputs: list[tuple[str, str | Path]], names=None) -> dict:
    """The run's receipt (autheval.reporting.receipt): a command line that re-runs it from anywhere (absolute
    paths, the scheme and seed it resolved to; no --output-dir, which `verify` supplies), every input's
    SHA-256, the configuration."""
    from autheval.reporting.receipt import build_receipt, input_entry

    argv = [command]
    for (flag, path), name in zip(inputs, names or [None] * len(inputs)):
        argv += [flag, f"{name}={_input_text(path)}" if name else _input_text(path)]
    for contrast in getattr(args, "contrast", None) or []:
        argv += ["--contrast", contrast]
    if getattr(args, "by", None):
        argv += ["--by", args.by]
    if getattr(args, "unpaired", False):
        argv += ["--unpaired"] + (["--strata", args.strata] if args.strata else [])
    argv += [
        "--scheme",
        result.scheme,
        "--reps",
        str(result.reps),
        "--seed",
        str(result.seed),
        "--lower",
        repr(args.lower),
        "--upper",
        repr(args.upper),
        "--engine",
        args.engine,
    ]
    if args.spark_master:
        argv += ["--spark-master", args.spark_master]
    argv += ["--no-progress"]  # no --output-dir: the receipt is the same wherever the results were written
    config = {
        "scheme": result.scheme,
        "seed": result.seed,
        "reps": result.reps,
        "quantiles": [args.lower, args.upper],
        "engine": args.engine,
    }
    entries = [
        input_entry(flag, path) if "://" not in str(path) else _uri_entry(flag, str(path)) for flag, path in inputs
    ]
    return build_receipt(command, argv, entries, [], config)


def _input_text(path) -> str:
    """A record input as a receipt names it: a URI as given, a path absolute (folders and globs too)."""
    return str(path) if "://" in str(path) else str(Path(path).resolve())


def _source_label(path) -> str:
    """A record input as the results name it (the `source` column, summary.md): a URI as given, else the
    file's name (a folder's with a trailing '/', a glob with its folder's), never the folder it lies in,
    so the same input gives the same bytes in any folder; the receipt keeps the absolute path."""
    text = str(path)
    if "://" in text:
        return text
    resolved = Path(_input_text(path))
    if resolved.is_dir():
        return resolved.name + "/"
    from autheval.io import GLOB_CHARACTERS

    if any(ch in resolved.name for ch in GLOB_CHARACTERS):
        return f"{resolved.parent.name}/{resolved.name}"
    return resolved.name


def _uri_entry(flag: str, uri: str) -> dict:
    """A receipt's input entry for a dataset given as a URI (receipt.input_entry's layout; the data
    hash of autheval.io, which verify re-derives from the URI)."""
    from autheval.io import data_sha256

    return {"role": flag, "path": uri, "sha256": data_sha256(uri)}


def record_input_flag(text: str):
    """argparse type of a record input: a URI kept as text (a Path would fold its `//`), else a path."""
    return text if "://" in text else path_flag(text)


SLOW_SECONDS = 2.0  # a step that took longer says so on stderr


def _read_with_progress(read_records, args, path, analysis=None, con=None):
    """read_records of the input as the receipt names it (`_input_text`: a path absolute, so the
    results name it as the re-run of `verify` will), with one line on stderr (rows read, seconds) when
    it was slow."""
    import time

    started = time.monotonic()
    records = replace(read_records(_input_text(path), analysis=analysis, con=con), source=_source_label(path))
    seconds = time.monotonic() - started
    if args.progress and seconds >= SLOW_SECONDS:
        _progress(
            f"autheval: read and validated {records.n_cases:,} rows in {records.n_clusters:,} clusters "
            f"from {path} ({seconds:.1f} s)"
        )
    return records


def _bootstrap_progress(args):
    """The estimators' progress lines (replicates done, now and then) on stderr, or None."""
    if not args.progress:
        return None
    return lambda line: _progress(f"autheval: {line}")


def _parse_arm(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise RecordError("--arm", None, f"expected NAME=PATH, got {text!r}")
    from autheval.vocabulary import name_problem

    if name_problem(name):  # ' a' could never be named in a contrast; 'all' is the pooled rows' name
        raise RecordError("--arm", None, f"the NAME {name_problem(name)}", f"got {text!r}")
    return name, path


def _parse_contrast(text: str) -> tuple[str, str]:
    a, sep, b = text.partition(" minus ")
    if not sep:
        raise RecordError("--contrast", None, f'expected "A minus B", got {text!r}')
    return a.strip(), b.strip()


def _arms_and_contrasts(args) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The arms (NAME, PATH) and the contrasts (A, B) of `compare`, checked before any record is read:
    arm names unique, every contrast two different known arms, no contrast twice (default: each later arm
    minus the first)."""
    arms = [_parse_arm(a) for a in args.arm]
    names = [name for name, _ in arms]
    for name in names:
        if names.count(name) > 1:
            raise RecordError("--arm", None, f"the arm name {name!r} is given twice")
    if not args.contrast:
        return arms, [(name, names[0]) for name in names[1:]]
    contrasts = []
    for text in args.contrast:
        a, b = _parse_contrast(text)
        got = f"got {text!r}"
        for arm in (a, b):
            if arm not in names:
                raise RecordError("--contrast", None, f"unknown arm {arm!r} (arms: {', '.join(names)})", got)
        if a == b:
            raise RecordError("--contrast", None, "compares an arm with itself (A and B must differ)", got)
        if (a, b) in contrasts:
            raise RecordError("--contrast", None, "is given twice", got)
        contrasts.append((a, b))
    return arms, contrasts


def cmd_compare(args) -> int:
    from autheval.estimation.estimators import warn_if_no_contrast
    from autheval.reporting.outputs import COMPARE_FILES, write_compare_outputs
    from autheval.reporting.receipt import RECEIPT

    if args.unpaired:
        return _compare_unpaired(args)
    if args.strata:
        raise RecordError("--strata", None, "stratifies an unpaired comparison: give --unpaired too")
    arms, contrasts = _arms_and_contrasts(args)
    _check_bootstrap_flags(args, [(f"--arm {name}", path) for name, path in arms], (*COMPARE_FILES, RECEIPT))
    from warehouse.sql import connect

    with connect() as reading:  # one database for every arm's validation
        records = _read_arms(args, arms, reading)
    warn_if_no_contrast([name for name, _ in arms], contrasts)
    with _engine(args, args.scheme or _default_scheme(records)) as engine:
        try:
            result = _estimate_by_flags(args, records, engine, contrasts=contrasts)
        except RecordError as err:
            if "needs identical clusters" not in err.rule:
                raise
            raise RecordError(
                err.source, err.column, err.rule + " (arms of independent clusters: compare --unpaired)", err.example
            ) from None
    receipt = _bootstrap_receipt(
        args, "compare", result, [("--arm", path) for _, path in arms], names=[name for name, _ in arms]
    )
    for path in write_compare_outputs(result, args.output_dir, receipt):
        print(path)
    return 0


def _read_arms(args, arms: list[tuple[str, str]], reading) -> list:
    """The arms of `compare` read and validated two at a time, each on a cursor of `reading` (DuckDB runs
    them side by side: a small arm's read is mostly fixed costs), their warnings and any refusal in arm
    order, as if read one by one."""
    from concurrent.futures import ThreadPoolExecutor

    from autheval.records.read import read_dataset, warn_unused

    def read(arm: tuple[str, str]):
        name, path = arm
        with reading.cursor() as cursor:
            return _read_with_progress(read_dataset, args, path, analysis=name, con=cursor)

    with ThreadPoolExecutor(2, thread_name_prefix="autheval-arms") as pool:
        return [warn_unused(records, _input_text(path)) for records, (_, path) in zip(pool.map(read, arms), arms)]


def _compare_unpaired(args) -> int:
    """`compare --unpaired [--strata COLS]`: arms that are independent samples of clusters
    (autheval.estimation.unpaired); unpaired_contrast.csv, each arm's (or arm and stratum's) estimates.csv."""
    from autheval.estimation.estimators import warn_if_no_contrast
    from autheval.estimation.unpaired import check_strata_clusters, unpaired_contrasts
    from autheval.records.read import read_records
    from autheval.reporting.outputs import UNPAIRED_FILES, write_unpaired_outputs
    from autheval.reporting.receipt import RECEIPT

    arms, contrasts = _arms_and_contrasts(args)
    if len(arms) < 2:
        raise RecordError("--arm", None, "an unpaired comparison needs two arms or more (repeat --arm NAME=FILE)")
    names = [name for name, _ in arms]
    strata = _column_list("--strata", args.strata) if args.strata else ()
    _check_bootstrap_flags(args, [(f"--arm {name}", path) for name, path in arms], (*UNPAIRED_FILES, RECEIPT))
    if args.engine != "duckdb":
        raise RecordError("--engine", None, "an unpaired comparison runs in this process: use --engine duckdb")
    from warehouse.sql import connect

    cells = []
    with connect() as reading:
        for name, path in arms:
            if strata:
                table, groups = _split_records(path, strata, "--strata", analysis=name, con=reading)
                check_strata_clusters(table, strata, _input_text(path))
                cells.append((name, groups))
            else:
                cells.append((name, [((), _read_with_progress(read_records, args, path, analysis=name, con=reading))]))
    warn_if_no_contrast(names, contrasts)
    recordsets = [records for _, groups in cells for _, records in groups]
    scheme = args.scheme or _default_scheme(recordsets)
    quantiles = (args.lower, args.upper)
    rows = unpaired_contrasts(cells, contrasts, scheme, args.reps, args.seed, quantiles, strata)
    result = _estimate_by_flags(args, recordsets)
    receipt = _bootstrap_receipt(args, "compare", result, [("--arm", path) for _, path in arms], names=names)
    for written in write_unpaired_outputs(rows, result, args.output_dir, receipt):
        print(written)
    return 0


class _UnneededImports:
    """An import finder that refuses what evaluate/compare never use: pandas, which pyarrow and DuckDB
    import (when it is installed) only to ask whether an object is a pandas object, and
    pyarrow.dataset, which DuckDB imports to scan an Arrow table through a dataset scanner; without it
    DuckDB reads the table's batches directly (the same rows). Without them every run starts sooner and
    a large log is read and validated faster (figures: docs/benchmarks.md, "Figures behind design choices")."""

    REFUSED = ("pandas", "pyarrow.dataset")

    def find_spec(self, name, path=None, target=None):
        if any(name == r or name.startswith(r + ".") for r in self.REFUSED):
            raise ImportError(f"{name} is not used by this command")
        return None


EVALUATE_HELP = "evaluate one record file (AuthEval log or case trace)"
EVALUATE_DESCRIPTION = """\
Evaluate one record file (CSV or Parquet). The schema is detected from the columns: the AuthEval log schema
(case_id, [cluster_id], proposed_action, executed_action, utility_executed_local, [utility_proposed_local],
[utility_proposed_global]) or the case-trace schema (image_id, cluster_id, a_head, a_exec, Uz_head, Uz_exec,
[Ug_head]). Writes summary.json, summary.md, authority_summary.csv and estimates.csv to --output-dir and
prints their paths. A number the record cannot support is reported as not recoverable, never as a number."""

COMPARE_HELP = "compare proposal mechanisms on identical clusters, or unpaired arms (--unpaired)"
COMPARE_DESCRIPTION = """\
Compare the authority gap of several proposal mechanisms (arms) evaluated on the same clusters. Writes
proposal_dependence_summary.csv, paired_contrast.csv and estimates.csv to --output-dir and prints their paths.
With --unpaired the arms are independent samples of clusters (model versions as deployed): writes
unpaired_contrast.csv (the difference of every metric, bootstrap and delta-method intervals) and estimates.csv."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `evaluate` and `compare` to the `autheval` parser."""
    p = add_command(subparsers, "evaluate", EVALUATE_HELP, EVALUATE_DESCRIPTION)
    p.add_argument(
        "--input",
        required=True,
        type=record_input_flag,
        metavar="PATH",
        help="the records: a CSV or Parquet file, a folder or glob of Parquet files (one dataset, in "
        "name order), or a URI (file:///..., an object store such as s3://bucket/prefix); read "
        "where they lie, streaming",
    )
    p.add_argument(
        "--by",
        metavar="COL[,COL...]",
        help="one analysis per combination of these columns' values (e.g. site,model_version): estimates.csv "
        "with each row labelled by its group; every row needs a value (not empty, no surrounding spaces)",
    )
    _add_bootstrap_flags(p)
    p.set_defaults(func=cmd_evaluate)

    p = add_command(subparsers, "compare", COMPARE_HELP, COMPARE_DESCRIPTION)
    p.add_argument(
        "--arm",
        action="append",
        required=True,
        metavar="NAME=FILE",
        help="one arm: a name and its records (a file, a folder or glob of Parquet files, or a URI, "
        "as --input of evaluate; repeat the flag for each arm); the first arm is the baseline of "
        "the default contrasts",
    )
    p.add_argument(
        "--contrast",
        action="append",
        metavar='"A minus B"',
        help="a paired contrast of two arm names (repeatable); default: each later arm minus the first",
    )
    p.add_argument(
        "--unpaired",
        action="store_true",
        help="the arms are independent samples of clusters (e.g. a service before and after a model version "
        "change): each arm resampled on its own; writes unpaired_contrast.csv and estimates.csv",
    )
    p.add_argument(
        "--strata",
        metavar="COL[,COL...]",
        help="with --unpaired: resample clusters within each stratum of these columns' values (e.g. "
        "site,risk_stratum), strata weighted by their pooled share in both arms; declared in every row",
    )
    _add_bootstrap_flags(p)
    p.set_defaults(func=cmd_compare)
