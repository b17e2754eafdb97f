"""The `autheval` command line. Heavy packages (Dagster, torch) are imported only by the commands
that need them, so `autheval evaluate` and `autheval compare` stay quick."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autheval import __version__
from autheval.errors import RecordError
from autheval.cli.aggregate import AGGREGATE_HELP
from autheval.cli.flags import SEED_MAX, check_seed, path_flag
from autheval.vocabulary import SCHEMES
from warehouse.sql import load_sql

DESCRIPTION = """\
Authority-preserving evaluation of medical vision-language assistants.

A model proposes an action (how urgently a lesion is reviewed); the local service keeps the authority
to accept or replace it. autheval scores both under the same local rule and reports the authority gap
Delta = J_auth - J = p * delta, with whole-cluster bootstrap intervals, per image and per cluster."""

EPILOG = """\
examples:
  autheval evaluate --input log.csv --output-dir results
  autheval compare --arm "A=a.csv" --arm "B=b.csv" --output-dir results
  autheval demo                      # the reference study into warehouse/lake, then its tables
  autheval query "select * from study_summary"

Results go to stdout (and files); progress and errors go to stderr. Bad input ends with one line
naming the file, flag or column, and exit code 2.
Run `autheval COMMAND --help` for the options of each command."""

# warehouse.lake.DEFAULT_LAKE, spelled out for the same reason (warehouse.lake imports pyarrow)
DEFAULT_LAKE = Path("warehouse") / "lake"


def _add_bootstrap_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scheme", choices=SCHEMES, default=None,
                        help="how clusters are resampled: reference (AuthEval's analysis scheme), evaluator "
                             "(AuthEval's log evaluator) or poisson (Poisson(1) weights, for very large logs); "
                             "default: reference for case traces, evaluator for logs")
    parser.add_argument("--reps", type=int, default=5000, metavar="N",
                        help="bootstrap replicates (default 5000)")
    parser.add_argument("--seed", type=int, default=None, metavar="S",
                        help=f"random seed, an integer from 0 to {SEED_MAX} (2^62 - 1) for every scheme "
                             "(default: the scheme's own, 20260711 for reference and poisson, 20260710 for "
                             "evaluator)")
    parser.add_argument("--lower", type=float, default=0.025, metavar="Q",
                        help="lower quantile of the interval (default 0.025)")
    parser.add_argument("--upper", type=float, default=0.975, metavar="Q",
                        help="upper quantile of the interval (default 0.975)")
    parser.add_argument("--engine", default="duckdb", metavar="NAME",
                        help="where the estimators run: duckdb (in this process, the default) or spark (a "
                             "local Spark session bound to 127.0.0.1, or the cluster of --spark-master; needs "
                             "the spark extra and Java 17); the numbers agree to 1e-12")
    parser.add_argument("--spark-master", default=None, metavar="URL",
                        help="with --engine spark: an existing cluster (spark://HOST:7077, sc://HOST:15002, "
                             "yarn, k8s://URL); default local[N] on this machine's cores")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="print no progress lines (by default a run longer than a few seconds reports rows "
                             "read and bootstrap replicates done on stderr, never on stdout)")
    parser.add_argument("--output-dir", type=path_flag, default=Path("."), metavar="DIR",
                        help="folder for the result files, created if missing (default: the current folder); "
                             "all files are replaced together or none is")


def _check_bootstrap_flags(args, inputs: list[tuple[str, Path]], files: tuple[str, ...]) -> None:
    """Fail before any work, in one line naming the flag: also when a result file would replace one of
    the `inputs` (flag, path)."""
    from autheval.estimation.estimators import check_reps
    from autheval.cli.flags import check_not_an_input
    from autheval.reporting.outputs import check_output_dir

    check_seed(args.seed)
    check_reps(args.reps)
    from warehouse.engine import engine_config

    engine_config(args.engine, args.spark_master)  # unknown engine, Spark extra, Java, master: one line
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


def _default_scheme(recordsets) -> str:
    return "reference" if all(r.schema == "trace" for r in recordsets) else "evaluator"


def cmd_evaluate(args) -> int:
    from autheval.estimation.estimators import estimate
    from autheval.reporting.outputs import EVALUATE_FILES, write_evaluate_outputs
    from autheval.reporting.receipt import RECEIPT
    from autheval.records.read import read_records

    _check_bootstrap_flags(args, [("--input", args.input)], (*EVALUATE_FILES, RECEIPT))
    records = _read_with_progress(read_records, args, args.input)
    scheme = args.scheme or _default_scheme([records])
    with _engine(args, scheme) as engine:
        result = estimate([records], scheme=scheme, reps=args.reps, seed=args.seed,
                          quantiles=(args.lower, args.upper), engine=engine, progress=_bootstrap_progress(args))
    receipt = _bootstrap_receipt(args, "evaluate", result, [("--input", args.input)])
    for path in write_evaluate_outputs(result, records.analysis, args.output_dir, receipt):
        print(path)
    return 0


def _bootstrap_receipt(args, command: str, result, inputs: list[tuple[str, Path]], names=None) -> dict:
    """The run's receipt (autheval.reporting.receipt): a command line that re-runs it from anywhere (absolute
    paths, the scheme and seed it resolved to; no --output-dir, which `verify` supplies), every input's
    SHA-256, the configuration."""
    from autheval.reporting.receipt import build_receipt, input_entry

    argv = [command]
    for (flag, path), name in zip(inputs, names or [None] * len(inputs)):
        argv += [flag, f"{name}={_input_text(path)}" if name else _input_text(path)]
    for contrast in getattr(args, "contrast", None) or []:
        argv += ["--contrast", contrast]
    argv += ["--scheme", result.scheme, "--reps", str(result.reps), "--seed", str(result.seed),
             "--lower", repr(args.lower), "--upper", repr(args.upper), "--engine", args.engine]
    if args.spark_master:
        argv += ["--spark-master", args.spark_master]
    argv += ["--no-progress"]  # no --output-dir: the receipt is the same wherever the results were written
    config = {"scheme": result.scheme, "seed": result.seed, "reps": result.reps, "quantiles": [args.lower, args.upper],
              "engine": args.engine}
    entries = [input_entry(flag, path) if "://" not in str(path) else _uri_entry(flag, str(path))
               for flag, path in inputs]
    return build_receipt(command, argv, entries, [], config)


def _input_text(path) -> str:
    """A record input as a receipt names it: a URI as given, a path absolute (folders and globs too)."""
    return str(path) if "://" in str(path) else str(Path(path).resolve())


def _uri_entry(flag: str, uri: str) -> dict:
    """A receipt's input entry for a dataset given as a URI (receipt.input_entry's layout; the data
    hash of autheval.records.read, which verify re-derives from the URI)."""
    from autheval.records.read import data_sha256

    return {"role": flag, "path": uri, "sha256": data_sha256(uri)}


def record_input_flag(text: str):
    """argparse type of a record input: a URI kept as text (a Path would fold its `//`), else a path."""
    return text if "://" in text else path_flag(text)


SLOW_SECONDS = 2.0  # a step that took longer says so on stderr


def _read_with_progress(read_records, args, path, analysis=None, con=None):
    """read_records, with one line on stderr (rows read, seconds) when it was slow."""
    import time

    started = time.monotonic()
    records = read_records(path, analysis=analysis, con=con)
    seconds = time.monotonic() - started
    if args.progress and seconds >= SLOW_SECONDS:
        _progress(f"autheval: read and validated {records.n_cases:,} rows in {records.n_clusters:,} clusters "
                  f"from {path} ({seconds:.1f} s)")
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
    return name, path


def _parse_contrast(text: str) -> tuple[str, str]:
    a, sep, b = text.partition(" minus ")
    if not sep:
        raise RecordError("--contrast", None, f"expected \"A minus B\", got {text!r}")
    return a.strip(), b.strip()


def cmd_compare(args) -> int:
    from autheval.estimation.estimators import estimate, warn_if_no_contrast
    from autheval.reporting.outputs import COMPARE_FILES, write_compare_outputs
    from autheval.reporting.receipt import RECEIPT
    from autheval.records.read import read_records

    arms = [_parse_arm(a) for a in args.arm]
    _check_bootstrap_flags(args, [(f"--arm {name}", Path(path)) for name, path in arms], (*COMPARE_FILES, RECEIPT))
    from warehouse.sql import connect

    with connect() as reading:  # one connection for every arm's validation
        records = [_read_with_progress(read_records, args, path, analysis=name, con=reading) for name, path in arms]
    if args.contrast:
        contrasts = [_parse_contrast(c) for c in args.contrast]
    else:  # every later arm against the first
        contrasts = [(name, arms[0][0]) for name, _ in arms[1:]]
    warn_if_no_contrast([name for name, _ in arms], contrasts)
    scheme = args.scheme or _default_scheme(records)
    with _engine(args, scheme) as engine:
        result = estimate(records, scheme=scheme, reps=args.reps, seed=args.seed,
                          quantiles=(args.lower, args.upper), contrasts=contrasts, engine=engine,
                          progress=_bootstrap_progress(args))
    receipt = _bootstrap_receipt(args, "compare", result, [("--arm", path) for _, path in arms],
                                 names=[name for name, _ in arms])
    for path in write_compare_outputs(result, args.output_dir, receipt):
        print(path)
    return 0


def _progress(line: str) -> None:
    """Progress is for the person watching: stderr, so stdout carries only results."""
    print(line, file=sys.stderr, flush=True)


def _check_demo_flags(args):
    """Everything `demo` is told is checked before Dagster starts: one line naming the flag, exit 2.
    Returns the --rules file parsed (the run takes this one and parses it no more), else None."""
    from autheval.estimation.estimators import check_reps
    from autheval.cli.flags import check_inputs_outside
    from autheval.reporting.outputs import check_output_dir

    check_output_dir(args.lake, "--lake")
    check_reps(args.reps)
    check_inputs_outside(args.lake, [(flag, getattr(args, flag[2:].replace("-", "_"))) for flag in (
        "--input", "--freeze", "--proposals", "--rules", "--gate-scores", "--scorer-dir", "--vision-dir",
        "--benchmark")], "--lake")
    if args.min_group_clusters < 1:
        raise RecordError("--min-group-clusters", None, f"must be at least 1, got {args.min_group_clusters}")
    if args.source == "reference":
        for flag, value in (("--input", args.input), ("--freeze", args.freeze), ("--proposals", args.proposals),
                            ("--rules", args.rules), ("--gate-scores", args.gate_scores),
                            ("--scorer-dir", args.scorer_dir), ("--vision-dir", args.vision_dir),
                            ("--benchmark", args.benchmark),
                            ("--finetune", args.finetune or None), ("--grpo", args.grpo or None)):
            if value is not None:
                raise RecordError(flag, None, "is for the synthetic and isic2019 sources; the reference source is embedded")
        return
    if args.source == "isic2019" and args.input is None:
        raise RecordError("--input", None, "--source isic2019 needs --input DIR (the official ISIC 2019 files)")
    if args.input is not None and not args.input.is_dir():
        what = "is a file, not a folder" if args.input.exists() else "no such folder"
        raise RecordError("--input", None, f"{args.input}: {what} (expected the ISIC 2019 files)")
    if args.freeze is not None and not args.freeze.is_file():
        what = "is a folder, not a file" if args.freeze.exists() else "no such file"
        raise RecordError("--freeze", None, f"{args.freeze}: {what}")
    if args.input is None:
        from autheval.cli.synth import check_cohort_size

        check_cohort_size(args.n, args.lake / "synthetic_cohort", tuple(args.size), confirm=None)  # before Dagster
    for flag, value in (("--proposals", args.proposals), ("--gate-scores", args.gate_scores),
                        ("--benchmark", args.benchmark)):
        if value is not None and not value.is_file():
            raise RecordError(flag, None, f"{value}: no such file")
    for flag, value in (("--scorer-dir", args.scorer_dir), ("--vision-dir", args.vision_dir)):
        if value is not None and not value.is_dir():
            raise RecordError(flag, None, f"{value}: no such folder (a local model directory; nothing is downloaded)")
    if args.no_models and (args.scorer_dir or args.vision_dir or args.finetune or args.grpo):
        raise RecordError("--no-models", None, "turns the model mechanisms off; drop --scorer-dir, --vision-dir, "
                          "--finetune and --grpo, or --no-models")
    if args.grpo_steps < 0:
        raise RecordError("--grpo-steps", None, f"must be 0 (one epoch) or a positive number of steps, got {args.grpo_steps}")
    rule_file = None
    if args.rules is not None:
        from autheval.review.rules import load_rules

        rule_file = load_rules(args.rules)  # a bad rule file is one line naming the key, before anything runs
    if args.proposals is not None:
        from autheval.proposals.proposals_file import precheck_proposals

        # every rule that needs no lake (the image ids are checked against the lake's images); with
        # --freeze, the coverage of the evaluated split too
        precheck_proposals(args.proposals, args.freeze, args.evaluate_split)
    if args.benchmark is not None:
        from autheval.estimation.benchmark import read_benchmark

        read_benchmark(args.benchmark)  # every rule but the image ids (the benchmark asset checks those)
    return rule_file


def cmd_demo(args) -> int:
    rules = _check_demo_flags(args)  # before Dagster is imported: a bad flag costs no start-up

    import pyarrow as pa

    from dagster_project.demo import COHORT_STAGES, RAW_STAGES, REFERENCE_STAGES, BlockingCheckFailed, run_stages
    from assets.resources import ModelsResource, SourceResource
    from warehouse.lake import DEFAULT_LAKE, Lake

    lake = Lake(args.lake)
    models = ModelsResource(enabled=_demo_models_enabled(args), scorer_dir=_resolved_path(args.scorer_dir),
                            vision_dir=_resolved_path(args.vision_dir), finetune=args.finetune or args.grpo,
                            grpo=args.grpo, grpo_max_steps=args.grpo_steps)
    if args.source == "reference":
        source, stages, extra = SourceResource(kind="reference", reps=args.reps), REFERENCE_STAGES, ()
    else:
        input_dir = args.input
        if input_dir is None:
            from autheval.cli.synth import write_synthetic_cohort

            input_dir = lake.root / "synthetic_cohort"
            _progress(f"Writing a synthetic ISIC-shaped cohort of {args.n} images ({args.size[0]} x {args.size[1]}) "
                      f"to {input_dir}")
            write_synthetic_cohort(args.n, input_dir, size=tuple(args.size), overwrite=True)

        def resolved(path):
            return str(path.resolve()) if path else ""

        source = SourceResource(kind=args.source, input_dir=str(Path(input_dir).resolve()), freeze=resolved(args.freeze),
                                reps=args.reps, proposals=resolved(args.proposals),
                                gate_scores=resolved(args.gate_scores), evaluate_split=args.evaluate_split,
                                benchmark=resolved(args.benchmark),
                                min_group_clusters=args.min_group_clusters)
        if source.proposals_file() or models.enabled:
            stages, extra = COHORT_STAGES, ()
        else:
            stages, extra = RAW_STAGES, ("catalog",)
            _progress("No proposals for this cohort (--proposals FILE, or model mechanisms with --scorer-dir): "
                      "the raw path and the review contexts only")
    if models.enabled:
        from models.finetune import name_deepspeed_accelerator

        name_deepspeed_accelerator()  # else deepspeed's accelerator warning is the first line of stdout
        _progress("Model mechanisms on: VLM readout, CLIP probe, CCT single, CCT cc"
                  + (", VLM LoRA fine-tuned" if models.finetune else "") + (", VLM GRPO (MAVIC)" if models.grpo else "")
                  + f" (scorer {args.scorer_dir or 'tiny Gemma3'}, vision tower {args.vision_dir or 'tiny CLIP'})")
    _progress(f"Materializing the {args.source} source into {lake.root} (Dagster, in-process)")
    try:
        checks = run_stages(lake.root, stages, out=_progress, source=source, extra=extra, models=models,
                            receipt=_demo_receipt(args), rules=rules)
    except BlockingCheckFailed as err:  # not bad input: the data broke a guarded rule (exit 1)
        print(f"autheval: error: {err}", file=sys.stderr)
        return 1
    failed = sorted(name for name, passed in checks.items() if not passed)
    print(f"asset checks: {len(checks) - len(failed)} of {len(checks)} passed" + (f"; FAILED: {', '.join(failed)}" if failed else "")
          + (f"; skipped (not applicable to this source): {', '.join(sorted(checks.skipped))}" if checks.skipped else ""))
    _print_demo_tables(lake, source, stages)
    lake_flag = "" if lake.root == Lake(DEFAULT_LAKE).root else f" --lake {args.lake}"
    print(f"query:  autheval query \"select analysis, unit, metric, estimate, ci_lower, ci_upper from estimates\"{lake_flag}")
    return 1 if failed else 0


def _demo_receipt(args) -> dict:
    """The lake run's receipt before its outputs (dagster_project.demo fills them at the commit): a
    command line that re-runs it from anywhere (into any lake: `--lake` is left out, so the receipt is
    the same wherever the lake lies), the SHA-256 of every file flag's input."""
    from autheval.reporting.receipt import build_receipt, input_entry

    argv = ["demo", "--source", args.source]
    inputs = []
    for flag, value in (("--input", args.input), ("--freeze", args.freeze), ("--proposals", args.proposals),
                        ("--rules", args.rules), ("--gate-scores", args.gate_scores),
                        ("--scorer-dir", args.scorer_dir), ("--vision-dir", args.vision_dir),
                        ("--benchmark", args.benchmark)):
        if value is not None:
            argv += [flag, str(Path(value).resolve())]
            if Path(value).is_file():
                inputs.append(input_entry(flag, value))
    if args.source == "synthetic" and args.input is None:
        argv += ["--n", str(args.n), "--size", *map(str, args.size)]
    argv += ["--reps", str(args.reps), "--evaluate-split", args.evaluate_split,
             "--min-group-clusters", str(args.min_group_clusters)]
    argv += [flag for flag, on in (("--no-models", args.no_models), ("--finetune", args.finetune),
                                   ("--grpo", args.grpo)) if on]
    argv += ["--grpo-steps", str(args.grpo_steps)] if args.grpo else []
    config = {"source": args.source, "reps": args.reps, "evaluate_split": args.evaluate_split,
              "min_group_clusters": args.min_group_clusters, "models": _demo_models_enabled(args)}
    return build_receipt("demo", argv, inputs, [], config)


def _demo_models_enabled(args) -> bool:
    """The model mechanisms run for the synthetic source unless --no-models (tiny random models unless
    --scorer-dir/--vision-dir name real ones), and for isic2019 when a model flag asks for them."""
    if args.source == "reference" or args.no_models:
        return False
    return args.source == "synthetic" or bool(args.scorer_dir or args.vision_dir or args.finetune or args.grpo)


def _resolved_path(path) -> str:
    return str(path.resolve()) if path else ""


REFERENCE_TITLES = (("regimes", "Review regimes of the MedGemma readout"),
                    ("mechanisms", "Proposal mechanisms under the capacity ceiling"))


def _print_demo_tables(lake, source, stages) -> None:
    """The headline tables of what the demo built: the raw path, then every study's gaps, the paired
    contrasts and (raw cohorts) fairness."""
    import pyarrow as pa

    from autheval.reporting.report import headline
    from autheval.reporting.tables import render
    from warehouse.catalog import query

    if not source.is_reference:
        print()
        print(render(query(lake, load_sql("ingest/raw_path_summary")), title=f"Raw path on {source.input_dir}"))
    if "estimates" not in stages:
        return
    summary = lake.read("study_summary").to_pylist()
    studies = REFERENCE_TITLES if source.is_reference else [
        (study, f"Proposal mechanisms under the {study.replace('_', ' ')} regime")
        for study in dict.fromkeys(r["study"] for r in summary)]
    for study, title in studies:
        rows = [{k: v for k, v in headline(r).items() if k != "study"} for r in summary if r["study"] == study]
        print()
        print(render(pa.Table.from_pylist(rows), title=f"{title}: Delta = J_auth - J = p * delta"))
    contrasts = lake.read("contrasts")
    if contrasts.num_rows:
        print()
        print(render(contrasts.select(["contrast", "unit", "difference", "ci_lower", "ci_upper", "p_adjusted",
                                       "excludes_zero_adjusted", "excludes_zero"]),
                     title="Paired contrasts on identical clusters (excludes_zero_adjusted: Holm over the family)"))
    if not source.is_reference:
        print()
        print(render(query(lake, load_sql("estimates/fairness_summary")), title="Fairness: min/max group accuracy (1 = equal)"))
    if lake.has_table("benchmark_scores") and lake.read("benchmark_scores").num_rows:
        print()
        print(render(query(lake, load_sql("proposals/benchmark_summary")),
                     title="Benchmark accuracy by option likelihood [95% whole-cluster CI] (mechanisms sharing a model share it)"))
        print()
        print(render(query(lake, load_sql("proposals/benchmark_fairness_summary")),
                     title="Benchmark fairness: min/max group accuracy over every item (1 = equal)"))
        print()
        print(render(query(lake, load_sql("proposals/transfer_summary")),
                     title="Transfer: benchmark accuracy beside J, J_auth, p and Delta (image-weighted)"))
    print(f"\nreport: {lake.root / 'reports' / 'report.html'}")


def cmd_query(args) -> int:
    """Stream the result to stdout. Every way it can end is one line on stderr: a refused or failed
    query or an unreadable catalog (exit 2), stdout closed or its device full (exit 1), Ctrl-C (130);
    a reader that stops early (`| head`) ends it quietly (exit 0)."""
    import os

    def discard_stdout():  # so that the interpreter's last flush has nowhere to fail
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # not a file (a caller's buffer): nothing to flush at exit
            pass

    def fail(line: str, code: int) -> int:
        print(f"autheval: error: {line}", file=sys.stderr)
        return code

    if sys.stdout is None or not _is_open(sys.stdout):
        return fail("query: standard output is closed: nowhere to write the result", 1)
    try:
        from autheval.reporting.tables import write_batches
        from warehouse.catalog import stream
        from warehouse.lake import Lake

        output = _Output(sys.stdout)
        with _CtrlCStopsQueries():
            write_batches(stream(Lake(args.lake, snapshot=args.snapshot), args.sql), args.format, output)
        output.flush()
    except BrokenPipeError:  # `autheval query ... | head`: the reader has all it wanted
        discard_stdout()
    except _OutputFailed as err:
        discard_stdout()
        return fail(f"query: cannot write the result to standard output: {err}", 1)
    except FileNotFoundError as err:
        return fail(str(err), 2)
    except ValueError as err:  # QueryRefused, CatalogError: one line each
        return fail(str(err), 2)
    except KeyboardInterrupt:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C still pending is not a second traceback
        discard_stdout()
        print("autheval: interrupted", file=sys.stderr)
        return 130
    return 0


class _CtrlCStopsQueries:
    """Ctrl-C stops the running query at once: the signal's wakeup byte reaches a thread that
    interrupts DuckDB, which itself looks for a signal only between tasks (measured: a Ctrl-C in the
    first second of a long join was not seen for minutes). Main thread only; elsewhere a no-op."""

    def __enter__(self):
        import os
        import select
        import signal
        import threading

        from warehouse.catalog import interrupt_queries

        self._pipe = None
        if threading.current_thread() is not threading.main_thread():
            return self
        self._pipe = os.pipe()
        os.set_blocking(self._pipe[1], False)
        self._previous = signal.set_wakeup_fd(self._pipe[1])

        def watch():  # after a Ctrl-C, again every 0.1 s: one that lands before the query starts is lost
            stopping = False
            while True:
                if select.select([self._pipe[0]], [], [], 0.1 if stopping else None)[0]:
                    data = os.read(self._pipe[0], 64)
                    if not data:
                        return
                    stopping = stopping or signal.SIGINT in data
                if stopping:
                    interrupt_queries()

        self._watcher = threading.Thread(target=watch, name="autheval-ctrl-c", daemon=True)
        self._watcher.start()
        return self

    def __exit__(self, *exc) -> None:
        import os
        import signal

        if self._pipe is not None:
            signal.set_wakeup_fd(self._previous)
            os.close(self._pipe[1])  # the watcher reads the end of the pipe and stops
            self._watcher.join(timeout=1)
            os.close(self._pipe[0])


def _is_open(out) -> bool:
    """False for a stdout whose descriptor is closed (`>&-`); a stream without one counts as open."""
    import os

    try:
        os.fstat(out.fileno())
    except (AttributeError, ValueError):  # io.UnsupportedOperation (a buffer), or closed
        return not getattr(out, "closed", False)
    except OSError:
        return False
    return True


class _OutputFailed(Exception):
    """Writing to stdout failed (a full device, an I/O error): told apart from reading errors."""


class _Output:
    """stdout for `query`, with its write errors (other than a closed pipe) as _OutputFailed."""

    def __init__(self, out):
        self._out = out

    def write(self, text: str) -> int:
        try:
            return self._out.write(text)
        except BrokenPipeError:
            raise
        except OSError as err:
            raise _OutputFailed(err.strerror or str(err)) from err

    def flush(self) -> None:
        try:
            self._out.flush()
        except BrokenPipeError:
            raise
        except OSError as err:
            raise _OutputFailed(err.strerror or str(err)) from err


def _check_port(port: int) -> None:
    """A port the UI can serve on: in range and free on 127.0.0.1 now (one line, exit 2), so that a port
    in use is not a bind error printed by a server that keeps running."""
    import socket

    if not 1 <= port <= 65535:
        raise RecordError("--port", None, f"must be a port from 1 to 65535, got {port}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the web server binds
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as err:
            raise RecordError("--port", None, f"127.0.0.1:{port} is not free ({err.strerror or err}); "
                              "stop what serves there or choose another port") from err


def cmd_verify(args) -> int:
    from autheval.reporting.receipt import verification_lines, verify

    result = verify(args.receipt)
    for line in verification_lines(result):
        print(line)
    return 0 if result.identical else 1


def cmd_ui(args) -> int:
    """Serve the Dagster UI for this project on 127.0.0.1 until Ctrl-C, SIGINT or SIGTERM, which stop it
    with every process it started, also when it was started in the background (see _serve)."""
    import os

    from autheval.reporting.outputs import check_output_dir
    from warehouse.lake import Lake

    _check_port(args.port)
    check_output_dir(args.lake, "--lake")  # its .dagster_home is made there
    lake = Lake(args.lake)
    home = Path(os.environ.get("DAGSTER_HOME") or lake.root / ".dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        from dagster_project.definitions import instance_yaml

        config.write_text(instance_yaml())
    env = {**os.environ, "DAGSTER_HOME": str(home), "AUTHEVAL_LAKE": str(lake.root)}
    dagster = Path(sys.executable).with_name("dagster")
    command = [str(dagster), "dev", "-m", "dagster_project", "-h", "127.0.0.1", "-p", str(args.port)]
    _progress(f"Dagster UI on http://127.0.0.1:{args.port} (lake {lake.root}); Ctrl-C or SIGTERM stops it")
    return _serve(command, env)


UI_STOP_WAIT = 30.0  # seconds dagster dev gets to stop its services before what is left is killed


def _serve(command: list[str], env: dict) -> int:
    """Run `command` (dagster dev) in a process group of its own until it exits or this process gets
    SIGINT, SIGTERM or SIGHUP. A job started with `&` from a script inherits SIGINT ignored, and dagster
    dev maps SIGTERM to its SIGINT handler, so it would ignore both: here the command starts with both
    at their defaults (this process handles them), and a signal is passed on to it as SIGINT, its clean
    shutdown. Its group (the webserver, the daemon, the code servers) then gets UI_STOP_WAIT seconds,
    SIGTERM, and SIGKILL for what is left; a second signal kills at once. Killed itself (SIGKILL), this
    process cannot pass anything on: the kernel sends the command SIGINT (_interrupt_when_orphaned).
    Exit 0 after a requested stop, else the command's own status."""
    import contextlib
    import os
    import signal
    import subprocess
    import time

    received: list[int] = []
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in stops}
    try:
        # a signal this process handles is at its default in the child after exec (an ignored one is not)
        process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, process_group=0,
                                   preexec_fn=_interrupt_when_orphaned)
        while process.poll() is None and not received:
            time.sleep(0.2)
        if received:
            process.send_signal(signal.SIGINT)
        for sig, wait in ((None, UI_STOP_WAIT), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if sig is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and len(received) < 2 and _group_runs(process):
                time.sleep(0.2)
            if not _group_runs(process):
                break
        process.wait()
        return 0 if received else process.returncode
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt_when_orphaned() -> None:
    """In the child before exec (Linux): SIGINT when this process dies, even by SIGKILL, so that dagster
    dev still stops its services. Elsewhere nothing."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGINT))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _group_runs(process) -> bool:
    """Does any process of `process`'s group still run (the leader is reaped on the way; a member that
    has exited but is not reaped yet, a zombie, does not count where /proc tells)?"""
    import os

    process.poll()
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    if not Path("/proc/self/stat").exists():
        return True
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (name) ": state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(process.pid) and fields[0] != "Z":
            return True
    return False


def _command_word(argv: list[str]) -> str | None:
    """The subcommand named on a command line (the first word that is not an option), or None."""
    return next((word for word in argv if not word.startswith("-")), None)


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (argparse names the flag in its one-line error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse's own refusals (an unknown flag, a value of the wrong type, an empty path) as every
    other refusal is: one line on stderr, exit 2. Subcommands' parsers are of this class too."""

    def error(self, message: str):
        self.exit(2, f"autheval: error: {message}; see `{self.prog} --help`\n")


def build_parser(command: str | None = "aggregate") -> argparse.ArgumentParser:
    """The `autheval` parser. `command`: the subcommand about to run; `aggregate` is registered with
    its options (importing autheval.proposals.cct) only when it is that command (the default: every command)."""
    parser = _Parser(prog="autheval", description=DESCRIPTION, epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "evaluate", help="evaluate one record file (AuthEval log or case trace)",
        description="Evaluate one record file (CSV or Parquet). The schema is detected from the columns: the "
                    "AuthEval log schema (case_id, [cluster_id], proposed_action, executed_action, "
                    "utility_executed_local, [utility_proposed_local], [utility_proposed_global]) or the "
                    "case-trace schema (image_id, cluster_id, a_head, a_exec, Uz_head, Uz_exec, [Ug_head]). "
                    "Writes summary.json, summary.md, authority_summary.csv and estimates.csv to --output-dir "
                    "and prints their paths. A number the record cannot support is reported as not "
                    "recoverable, never as a number.")
    p.add_argument("--input", required=True, type=record_input_flag, metavar="PATH",
                   help="the records: a CSV or Parquet file, a folder or glob of Parquet files (one dataset, in "
                        "name order), or a URI (file:///..., an object store such as s3://bucket/prefix); read "
                        "where they lie, streaming")
    _add_bootstrap_flags(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser(
        "compare", help="compare proposal mechanisms on identical clusters",
        description="Compare the authority gap of several proposal mechanisms (arms) evaluated on the same "
                    "clusters. Writes proposal_dependence_summary.csv, paired_contrast.csv and estimates.csv "
                    "to --output-dir and prints their paths.")
    p.add_argument("--arm", action="append", required=True, metavar="NAME=FILE",
                   help="one arm: a name and its records (a file, a folder or glob of Parquet files, or a URI, "
                        "as --input of evaluate; repeat the flag for each arm); the first arm is the baseline of "
                        "the default contrasts")
    p.add_argument("--contrast", action="append", metavar='"A minus B"',
                   help="a paired contrast of two arm names (repeatable); default: each later arm minus the first")
    _add_bootstrap_flags(p)
    p.set_defaults(func=cmd_compare)

    from autheval.cli.synth import DEMO_N, DEMO_SIZE

    p = sub.add_parser(
        "demo", help="build the lake from the reference study (or a cohort) and print its tables",
        description="Materialize the lake's whole asset graph in this process (Dagster; no daemon or web "
                    "server) and print the asset-check tally and the study's tables to stdout; progress goes "
                    "to stderr. The default source is the published AuthEval reference study, shipped with "
                    "the package; the report is <lake>/reports/report.html. Exit code 1 if an asset check fails.")
    p.add_argument("--source", choices=["reference", "synthetic", "isic2019"], default="reference",
                   help="reference: the published study (embedded, the default); synthetic: a generated "
                        "ISIC-shaped cohort through the raw path; isic2019: the official ISIC 2019 files in --input")
    p.add_argument("--input", type=path_flag, metavar="DIR",
                   help="a cohort folder in the ISIC 2019 layout (isic2019: required; synthetic: instead of "
                        "generating one)")
    p.add_argument("--freeze", type=path_flag, metavar="FILE",
                   help="a split_freeze.csv to validate and use (synthetic and isic2019 sources)")
    p.add_argument("--n", type=int, default=DEMO_N,
                   help=f"images in the generated synthetic cohort (default {DEMO_N:,}: about 340 clusters in the "
                        "evaluated test split)")
    p.add_argument("--size", type=int, nargs=2, default=DEMO_SIZE, metavar=("W", "H"),
                   help=f"image size of the generated synthetic cohort (default {DEMO_SIZE[0]} {DEMO_SIZE[1]}: quick, and "
                        "the tiny models read 32-pixel images; with a real --scorer-dir give 1024 768, synth's size)")
    p.add_argument("--proposals", type=path_flag, metavar="FILE",
                   help="proposals of your mechanisms (CSV or Parquet: mechanism, image_id and per row the four "
                        "probabilities p_very_low..p_high, a slate \"a2 a1 a3 a0\" or an a_head); synthetic "
                        "cohorts bring their own")
    p.add_argument("--rules", type=path_flag, metavar="FILE",
                   help="declared local rules (YAML, see `autheval rules show`); default: the study's")
    p.add_argument("--gate-scores", type=path_flag, metavar="FILE",
                   help="per-image gate scores (image_id, s_gate) to use as given instead of fitting the gate proxy")
    p.add_argument("--evaluate-split", choices=["test", "val", "train", "all"], default="test",
                   help="the split the review and the estimates run on (default test)")
    p.add_argument("--min-group-clusters", type=int, default=30, metavar="N",
                   help="subgroups with fewer clusters or images are reported as not estimable (default 30)")
    p.add_argument("--no-models", action="store_true",
                   help="no model mechanisms (synthetic: by default the tiny VLM scorer's readout, a CLIP probe "
                        "and the CCT single and cc arms run beside the file's mechanisms)")
    p.add_argument("--scorer-dir", type=path_flag, metavar="DIR",
                   help="a local VLM directory for the scorer (Gemma3 / LLaVA style; default: a tiny random "
                        "Gemma3 built into <lake>/models); isic2019: turns the model mechanisms on")
    p.add_argument("--vision-dir", type=path_flag, metavar="DIR",
                   help="a local vision tower directory for the probe (default: a tiny random CLIP vision model)")
    p.add_argument("--finetune", action="store_true",
                   help="also LoRA fine-tune the scorer on the train split and score it as its own mechanism")
    p.add_argument("--grpo", action="store_true",
                   help="also train the fine-tuned scorer by GRPO on the MAVIC reward (implies --finetune) and "
                        "score it as its own mechanism, VLM GRPO (MAVIC)")
    p.add_argument("--grpo-steps", type=int, default=16, metavar="N",
                   help="GRPO optimizer steps, one image's group of 8 completions each (default 16; 0: one epoch "
                        "over the train split)")
    p.add_argument("--benchmark", type=path_flag, metavar="FILE",
                   help="a closed-ended benchmark (CSV or Parquet: item_id, image_id or image_path, question, "
                        "options, answer, axis, task, group) each model mechanism answers by option likelihood; "
                        "synthetic cohorts bring their own (benchmark.csv)")
    p.add_argument("--lake", type=path_flag, default=DEFAULT_LAKE, metavar="DIR",
                   help=f"lake folder, created if missing (default {DEFAULT_LAKE})")
    p.add_argument("--reps", type=int, default=5000, metavar="N",
                   help="bootstrap replicates of the estimates (default 5000, as published; with another N "
                        "the published-summary check compares the point estimates only)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "query", help="read-only SQL over the lake's catalog, streamed to stdout",
        description="Run one read-only statement (SELECT, WITH ... SELECT, DESCRIBE, SHOW, EXPLAIN [ANALYZE] of a "
                    "SELECT) over the lake's catalog and stream the result to stdout. Anything else (COPY, "
                    "EXPORT, ATTACH, SET, PRAGMA, CREATE, EXPLAIN ANALYZE of anything but a SELECT, several "
                    "statements, reading files other than those the catalog's views read) is refused with "
                    "exit code 2. A large sort spills to a private temporary folder outside the lake, capped "
                    "at 4 GiB or half its free space ($AUTHEVAL_QUERY_SPILL sets another cap) and removed "
                    "at exit.")
    p.add_argument("sql", help="one SQL statement, e.g. \"select * from estimates\"")
    p.add_argument("--lake", type=Path, default=DEFAULT_LAKE, help=f"lake folder (default {DEFAULT_LAKE})")
    p.add_argument("--snapshot", type=positive_int, default=None, metavar="N",
                   help="read kept snapshot N instead of the served one (`select * from lake_snapshots` lists them)")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table",
                   help="table (aligned text), csv, or json (one array of row objects; JSON has no NaN or "
                        "Infinity, so non-finite numbers are written as null)")
    p.set_defaults(func=cmd_query)

    from autheval.cli.synth import register as register_raw
    from autheval.cli.mavic import register as register_mavic
    from autheval.cli.monitor import register as register_monitor
    from autheval.cli.rules import register as register_rules
    register_raw(sub)
    register_rules(sub)
    register_monitor(sub)
    register_mavic(sub)
    if command == "aggregate":
        from autheval.cli.aggregate import register as register_aggregate

        register_aggregate(sub)
    else:  # listed in --help with its help line; its options are registered when it runs
        sub.add_parser("aggregate", help=AGGREGATE_HELP, add_help=False)

    p = sub.add_parser(
        "verify", help="re-derive a run from its receipt and compare every output",
        description="Re-hash the inputs a receipt.json names (written by evaluate, compare and every lake run "
                    "of demo), re-run its command into a temporary folder, and compare every output with the "
                    "receipt's SHA-256: one line per output (identical / DIFFERENT / missing / new), changed "
                    "inputs and packages named. Exit 0 when every output is identical, 1 otherwise.")
    p.add_argument("receipt", type=path_flag, metavar="RECEIPT", help="a receipt.json")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("ui", help="the Dagster UI for this project on 127.0.0.1")
    p.add_argument("--port", type=int, default=3000, help="port (default 3000)")
    p.add_argument("--lake", type=path_flag, default=DEFAULT_LAKE, help=f"lake folder (default {DEFAULT_LAKE})")
    p.set_defaults(func=cmd_ui)
    return parser


class _UnneededImports:
    """An import finder that refuses what evaluate/compare never use: pandas, which pyarrow and DuckDB
    import (when it is installed) only to ask whether an object is a pandas object, and
    pyarrow.dataset, which DuckDB imports to scan an Arrow table through a dataset scanner; without it
    DuckDB reads the table's batches directly (the same rows). Measured here: 0.3-0.7 s less per run,
    and a 1M-row log read and validated in 1.1-2.0 s instead of 2.6-3.6 s."""

    REFUSED = ("pandas", "pyarrow.dataset")

    def find_spec(self, name, path=None, target=None):
        if any(name == r or name.startswith(r + ".") for r in self.REFUSED):
            raise ImportError(f"{name} is not used by this command")
        return None


def main(argv: list[str] | None = None) -> int:
    """Run one command. Bad input (RecordError, ValueError: exit 2), what the machine refuses (OSError:
    a full disk, a read-only or forbidden folder; exit 1) and Ctrl-C (exit 130) end in one line on
    stderr, from whatever command and stage; any other exception is a bug and keeps its traceback."""
    try:
        return _run(argv)
    except RecordError as err:
        print(f"autheval: error: {err}", file=sys.stderr)
        return err.exit_code
    except ValueError as err:
        print(f"autheval: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"autheval: error: {_os_error_line(err)}", file=sys.stderr)
        return 1
    except BaseException as err:
        if type(err).__name__ in LAKE_REFUSALS and not _is_interrupt(err):
            print(f"autheval: error: {err}", file=sys.stderr)  # another run holds the lake; no such snapshot
            return 1
        if not _is_interrupt(err):
            raise
        print("autheval: interrupted", file=sys.stderr)
        return 130


# the lake's own refusals (warehouse.snapshots), named so that nothing is imported to catch them
LAKE_REFUSALS = ("LakeBusy", "SnapshotError")


def _run(argv: list[str] | None) -> int:
    if argv is None and sys.argv[1:2] in (["evaluate"], ["compare"]):
        import os

        # before numpy loads: the estimators' products are small and run beside their own threads
        # (see autheval.estimation.bootstrap.one_blas_thread, which does this where threadpoolctl is installed)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    parser = build_parser(_command_word(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    if (argv is None and args.command in ("evaluate", "compare")
            and not any(m in sys.modules for m in _UnneededImports.REFUSED)
            and args.engine == "duckdb"):  # Ibis's Spark backend imports pandas
        sys.meta_path.insert(0, _UnneededImports())  # the command-line process only, not a library caller
    if args.command in ("evaluate", "compare", "demo"):
        from autheval.records.read import print_warnings_plainly

        print_warnings_plainly()  # one `autheval: warning: ...` line each, on stderr
    return args.func(args)


# Ctrl-C as the libraries report it when it lands inside them (not KeyboardInterrupt): DuckDB's
# InterruptException and Dagster's DagsterExecutionInterruptedError, named so that neither is imported
INTERRUPTS = ("InterruptException", "DagsterExecutionInterruptedError")


def _is_interrupt(err: BaseException | None) -> bool:
    """Ctrl-C, also when a library re-raised it as its own error (DuckDB: RuntimeError('Query
    interrupted') from KeyboardInterrupt)."""
    while err is not None:
        if isinstance(err, KeyboardInterrupt) or type(err).__name__ in INTERRUPTS:
            return True
        err = err.__cause__
    return False


def _os_error_line(err: OSError) -> str:
    """An OSError in one line: the file, then what the system said (no errno number, no traceback)."""
    what = (err.strerror or str(err)).strip().splitlines()[0]
    if err.filename is None:
        return what
    where = f"{err.filename} -> {err.filename2}" if err.filename2 is not None else str(err.filename)
    return f"{where}: {what}"


if __name__ == "__main__":
    sys.exit(main())
