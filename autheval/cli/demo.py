"""`autheval demo`: the lake's whole asset graph materialized in this process (Dagster), from the
reference study or a cohort, then the asset-check tally and the study's tables on stdout.

autheval/cli/main.py calls register(subparsers); every flag is checked before Dagster (and pyarrow) is
imported, so a bad flag costs no start-up.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autheval.cli.common import DEFAULT_LAKE, _progress
from autheval.cli.flags import add_command, add_size_flag, path_flag
from autheval.errors import RecordError
from warehouse.sql import load_sql

# The demo's path flags, in the order they are checked and written into the receipt
PATH_FLAGS = (
    "--input",
    "--freeze",
    "--proposals",
    "--rules",
    "--gate-scores",
    "--scorer-dir",
    "--vision-dir",
    "--benchmark",
)


def _path_flags(args) -> list[tuple[str, Path | None]]:
    """(flag, value) of every path flag (PATH_FLAGS): one list for the checks and the receipt, so a new
    path flag cannot be checked in one place and forgotten in another."""
    return [(flag, getattr(args, flag[2:].replace("-", "_"))) for flag in PATH_FLAGS]


def _check_demo_flags(args):
    """Everything `demo` is told is checked before Dagster starts: one line naming the flag, exit 2.
    Returns the --rules file parsed (the run takes this one and parses it no more), else None."""
    from autheval.cli.flags import check_inputs_outside
    from autheval.estimation.estimators import check_reps
    from autheval.reporting.outputs import check_output_dir

    check_output_dir(args.lake, "--lake")
    check_reps(args.reps)
    check_inputs_outside(args.lake, _path_flags(args), "--lake")
    if args.min_group_clusters < 1:
        raise RecordError("--min-group-clusters", None, f"must be at least 1, got {args.min_group_clusters}")
    if args.source == "reference":
        trainers = [("--finetune", args.finetune), ("--grpo", args.grpo), ("--morph", args.morph)]
        for flag, value in [*_path_flags(args), *((flag, on or None) for flag, on in trainers)]:
            if value is not None:
                raise RecordError(
                    flag, None, "is for the synthetic and isic2019 sources; the reference source is embedded"
                )
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
    for flag, value in (
        ("--proposals", args.proposals),
        ("--gate-scores", args.gate_scores),
        ("--benchmark", args.benchmark),
    ):
        if value is not None and not value.is_file():
            raise RecordError(flag, None, f"{value}: no such file")
    for flag, value, role in (("--scorer-dir", args.scorer_dir, "scorer"), ("--vision-dir", args.vision_dir, "vision")):
        if value is not None and not value.is_dir():
            raise RecordError(flag, None, f"{value}: no such folder (a local model directory; nothing is downloaded)")
        if value is not None and not args.no_models:
            from models.model_dir import check_model_dir  # no torch: config, processor and weight headers

            check_model_dir(value, flag, role)  # no weights, truncated safetensors, a BERT folder: one line
    if args.no_models and (args.scorer_dir or args.vision_dir or args.finetune or args.grpo or args.morph):
        raise RecordError(
            "--no-models",
            None,
            "turns the model mechanisms off; drop --scorer-dir, --vision-dir, --finetune, --grpo and --morph, "
            "or --no-models",
        )
    if args.grpo_steps is not None and args.grpo_steps < 0:
        raise RecordError(
            "--grpo-steps", None, f"must be 0 (one epoch) or a positive number of steps, got {args.grpo_steps}"
        )
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

    from assets.resources import check_environment
    from dagster_project.definitions import lake_instance
    from warehouse.lake import Lake

    check_environment()  # every AUTHEVAL_* setting, one line naming a bad one, before anything is written
    lake = Lake(args.lake)
    lake.snapshot()  # a lake whose pointer is lost or corrupt is refused before the cohort is written into it
    # the runs are recorded where `autheval ui` looks ($DAGSTER_HOME, else <lake>/.dagster_home); a bad
    # dagster.yaml there is one line before the cohort is written
    with lake_instance(lake) as instance:
        return _run_demo(args, rules, lake, instance)


def _run_demo(args, rules, lake, instance) -> int:
    """The demo after its checks: the source, its stages run into `lake`, recorded in `instance`."""
    from assets.resources import ModelsResource, SourceResource
    from dagster_project.demo import COHORT_STAGES, RAW_STAGES, REFERENCE_STAGES, BlockingCheckFailed, run_stages
    from warehouse.lake import DEFAULT_LAKE, Lake

    models = ModelsResource(
        enabled=_demo_models_enabled(args),
        scorer_dir=_resolved_path(args.scorer_dir),
        vision_dir=_resolved_path(args.vision_dir),
        finetune=args.finetune or args.grpo or args.morph,
        grpo=args.grpo or args.morph,
        grpo_max_steps=_grpo_steps(args),
        morph_task=args.morph,
    )
    extra: tuple[str, ...]  # the assets run after the stages (run_stages)
    if args.source == "reference":
        source, stages, extra = SourceResource(kind="reference", reps=args.reps), REFERENCE_STAGES, ()
    else:
        input_dir = args.input
        if input_dir is None:
            from autheval.cli.synth import write_synthetic_cohort

            input_dir = Path(lake.root) / "synthetic_cohort"  # synth_cohort writes a local folder
            _progress(
                f"Writing a synthetic ISIC-shaped cohort of {args.n} images ({args.size[0]} x {args.size[1]}) "
                f"to {input_dir}"
            )
            write_synthetic_cohort(args.n, input_dir, size=tuple(args.size), overwrite=True)

        def resolved(path):
            return str(path.resolve()) if path else ""

        source = SourceResource(
            kind=args.source,
            input_dir=str(Path(input_dir).resolve()),
            freeze=resolved(args.freeze),
            reps=args.reps,
            proposals=resolved(args.proposals),
            gate_scores=resolved(args.gate_scores),
            evaluate_split=args.evaluate_split,
            benchmark=resolved(args.benchmark),
            min_group_clusters=args.min_group_clusters,
        )
        if source.proposals_file() or models.enabled:
            stages, extra = COHORT_STAGES, ()
        else:
            stages, extra = RAW_STAGES, ("catalog",)
            _progress(
                "No proposals for this cohort (--proposals FILE, or model mechanisms with --scorer-dir): "
                "the raw path and the review contexts only"
            )
    if models.enabled:
        from models.finetune import name_deepspeed_accelerator

        name_deepspeed_accelerator()  # else deepspeed's accelerator warning is the first line of stdout
        _progress(
            "Model mechanisms on: VLM readout, CLIP probe, CCT single, CCT cc"
            + (", VLM LoRA fine-tuned" if models.finetune else "")
            + (", VLM GRPO (MAVIC)" if models.grpo else "")
            + (" on the morphology task" if models.morph_task else "")
            + f" (scorer {args.scorer_dir or ('tiny Gemma3 -morph' if args.morph else 'tiny Gemma3')}, "
            + f"vision tower {args.vision_dir or 'tiny CLIP'})"
        )
    _progress(f"Materializing the {args.source} source into {lake.root} (Dagster, in-process)")
    try:
        checks = run_stages(
            lake.root,
            stages,
            out=_progress,
            source=source,
            extra=extra,
            models=models,
            receipt=_demo_receipt(args),
            rules=rules,
            instance=instance,
        )
    except BlockingCheckFailed as err:  # not bad input: the data broke a guarded rule (exit 1)
        print(f"autheval: error: {err}", file=sys.stderr)
        return 1
    failed = sorted(name for name, passed in checks.items() if not passed)
    print(
        f"asset checks: {len(checks) - len(failed)} of {len(checks)} passed"
        + (f"; FAILED: {', '.join(failed)}" if failed else "")
        + (f"; skipped (not applicable to this source): {', '.join(sorted(checks.skipped))}" if checks.skipped else "")
    )
    _print_demo_tables(lake, source, stages)
    lake_flag = "" if lake.root == Lake(DEFAULT_LAKE).root else f" --lake {args.lake}"
    print(
        'query:  autheval query "select analysis, unit, metric, estimate, ci_lower, ci_upper from estimates"'  # noqa: S608 -- a command line printed for the user, never executed here
        f"{lake_flag}"
    )
    return 1 if failed else 0


def _demo_receipt(args) -> dict:
    """The lake run's receipt before its outputs (dagster_project.demo fills them at the commit): a
    command line that re-runs it from anywhere (into any lake: `--lake` is left out, so the receipt is
    the same wherever the lake lies), the SHA-256 of every file flag's input."""
    from autheval.reporting.receipt import build_receipt, input_entry

    argv = ["demo", "--source", args.source]
    inputs = []
    for flag, value in _path_flags(args):
        if value is not None:
            argv += [flag, str(Path(value).resolve())]
            if Path(value).is_file():
                inputs.append(input_entry(flag, value))
    if args.source == "synthetic" and args.input is None:
        argv += ["--n", str(args.n), "--size", *map(str, args.size)]
    argv += [
        "--reps",
        str(args.reps),
        "--evaluate-split",
        args.evaluate_split,
        "--min-group-clusters",
        str(args.min_group_clusters),
    ]
    argv += [
        flag
        for flag, on in (
            ("--no-models", args.no_models),
            ("--finetune", args.finetune),
            ("--grpo", args.grpo),
            ("--morph", args.morph),
        )
        if on
    ]
    argv += ["--grpo-steps", str(_grpo_steps(args))] if args.grpo or args.morph else []
    config = {
        "source": args.source,
        "reps": args.reps,
        "evaluate_split": args.evaluate_split,
        "min_group_clusters": args.min_group_clusters,
        "models": _demo_models_enabled(args),
    }
    return build_receipt("demo", argv, inputs, [], config)


def _grpo_steps(args) -> int:
    """GRPO's steps: --grpo-steps, else 16, or with --morph 0 (its recipe's 48: in 16 the reward of some
    cohorts has not moved yet)."""
    if args.grpo_steps is not None:
        return args.grpo_steps
    return 0 if args.morph else 16


def _demo_models_enabled(args) -> bool:
    """The model mechanisms run for the synthetic source unless --no-models (tiny random models unless
    --scorer-dir/--vision-dir name real ones), and for isic2019 when a model flag asks for them."""
    if args.source == "reference" or args.no_models:
        return False
    return args.source == "synthetic" or bool(
        args.scorer_dir or args.vision_dir or args.finetune or args.grpo or args.morph
    )


def _resolved_path(path) -> str:
    return str(path.resolve()) if path else ""


REFERENCE_TITLES = (
    ("regimes", "Review regimes of the MedGemma readout"),
    ("mechanisms", "Proposal mechanisms under the capacity ceiling"),
)


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
    studies = (
        REFERENCE_TITLES
        if source.is_reference
        else [
            (study, f"Proposal mechanisms under the {study.replace('_', ' ')} regime")
            for study in dict.fromkeys(r["study"] for r in summary)
        ]
    )
    for study, title in studies:
        rows = [{k: v for k, v in headline(r).items() if k != "study"} for r in summary if r["study"] == study]
        print()
        print(render(pa.Table.from_pylist(rows), title=f"{title}: Delta = J_auth - J = p * delta"))
    contrasts = lake.read("contrasts")
    if contrasts.num_rows:
        print()
        print(
            render(
                contrasts.select(
                    [
                        "contrast",
                        "unit",
                        "difference",
                        "ci_lower",
                        "ci_upper",
                        "p_adjusted",
                        "excludes_zero_adjusted",
                        "excludes_zero",
                    ]
                ),
                title="Paired contrasts on identical clusters (excludes_zero_adjusted: Holm over the family)",
            )
        )
    if not source.is_reference:
        print()
        print(
            render(
                query(lake, load_sql("estimates/fairness_summary")),
                title="Fairness: min/max group accuracy (1 = equal)",
            )
        )
    if lake.has_table("benchmark_scores") and lake.read("benchmark_scores").num_rows:
        print()
        print(
            render(
                query(lake, load_sql("proposals/benchmark_summary")),
                title="Benchmark accuracy by option likelihood [95% whole-cluster CI] "
                "(mechanisms sharing a model share it)",
            )
        )
        print()
        print(
            render(
                query(lake, load_sql("proposals/benchmark_fairness_summary")),
                title="Benchmark fairness: min/max group accuracy over every item (1 = equal)",
            )
        )
        print()
        print(
            render(
                query(lake, load_sql("proposals/transfer_summary")),
                title="Transfer: benchmark accuracy beside J, J_auth, p and Delta (image-weighted)",
            )
        )
    print(f"\nreport: {lake.root / 'reports' / 'report.html'}")


DEMO_HELP = "build the lake from the reference study (or a cohort) and print its tables"
DEMO_DESCRIPTION = """\
Materialize the lake's whole asset graph in this process (Dagster; no daemon or web server) and print the
asset-check tally and the study's tables to stdout; progress goes to stderr. The default source is the
published AuthEval reference study, shipped with the package; the report is <lake>/reports/report.html. Exit
code 1 if an asset check fails."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `demo` to the `autheval` parser."""
    from autheval.cli.synth import DEMO_N, DEMO_SIZE

    p = add_command(subparsers, "demo", DEMO_HELP, DEMO_DESCRIPTION)
    p.add_argument(
        "--source",
        choices=["reference", "synthetic", "isic2019"],
        default="reference",
        help="reference: the published study (embedded, the default); synthetic: a generated "
        "ISIC-shaped cohort through the raw path; isic2019: the official ISIC 2019 files in --input",
    )
    p.add_argument(
        "--input",
        type=path_flag,
        metavar="DIR",
        help="a cohort folder in the ISIC 2019 layout (isic2019: required; synthetic: instead of generating one)",
    )
    p.add_argument(
        "--freeze",
        type=path_flag,
        metavar="FILE",
        help="a split_freeze.csv to validate and use (synthetic and isic2019 sources)",
    )
    p.add_argument(
        "--n",
        type=int,
        default=DEMO_N,
        help=f"images in the generated synthetic cohort (default {DEMO_N:,}: about 340 clusters in the "
        "evaluated test split)",
    )
    add_size_flag(
        p,
        DEMO_SIZE,
        f"image size of the generated synthetic cohort (default {DEMO_SIZE[0]} {DEMO_SIZE[1]}: "
        "quick, and the tiny models read 32-pixel images; "
        "with a real --scorer-dir give 1024 768, synth's size)",
    )
    p.add_argument(
        "--proposals",
        type=path_flag,
        metavar="FILE",
        help="proposals of your mechanisms (CSV or Parquet: mechanism, image_id and per row the four "
        'probabilities p_very_low..p_high, a slate "a2 a1 a3 a0" or an a_head); synthetic '
        "cohorts bring their own",
    )
    p.add_argument(
        "--rules",
        type=path_flag,
        metavar="FILE",
        help="declared local rules (YAML, see `autheval rules show`); default: the study's",
    )
    p.add_argument(
        "--gate-scores",
        type=path_flag,
        metavar="FILE",
        help="per-image gate scores (image_id, s_gate) to use as given instead of fitting the gate proxy",
    )
    p.add_argument(
        "--evaluate-split",
        choices=["test", "val", "train", "all"],
        default="test",
        help="the split the review and the estimates run on (default test)",
    )
    p.add_argument(
        "--min-group-clusters",
        type=int,
        default=30,
        metavar="N",
        help="subgroups with fewer clusters or images are reported as not estimable (default 30)",
    )
    p.add_argument(
        "--no-models",
        action="store_true",
        help="no model mechanisms (synthetic: by default the tiny VLM scorer's readout, a CLIP probe "
        "and the CCT single and cc arms run beside the file's mechanisms)",
    )
    p.add_argument(
        "--scorer-dir",
        type=path_flag,
        metavar="DIR",
        help="a local VLM directory for the scorer (Gemma3 / LLaVA style; default: a tiny random "
        "Gemma3 built into <lake>/models); isic2019: turns the model mechanisms on",
    )
    p.add_argument(
        "--vision-dir",
        type=path_flag,
        metavar="DIR",
        help="a local vision tower directory for the probe (default: a tiny random CLIP vision model)",
    )
    p.add_argument(
        "--finetune",
        action="store_true",
        help="also LoRA fine-tune the scorer on the train split and score it as its own mechanism",
    )
    p.add_argument(
        "--grpo",
        action="store_true",
        help="also train the fine-tuned scorer by GRPO on the MAVIC reward (implies --finetune) and "
        "score it as its own mechanism, VLM GRPO (MAVIC)",
    )
    p.add_argument(
        "--morph",
        action="store_true",
        help="fine-tune and GRPO on the learnable morphology task (implies --grpo; scorer default: tiny "
        "Gemma3 -morph): SFT on <morph>/<final_diagnosis> completions (120 steps), then GRPO that moves "
        "the MAVIC reward; a few CPU minutes",
    )
    p.add_argument(
        "--grpo-steps",
        type=int,
        default=None,
        metavar="N",
        help="GRPO optimizer steps, one image's group of 8 completions each (default 16; 0: one epoch "
        "over the train split; with --morph: default and 0 are its recipe's 48 steps of 2 images)",
    )
    p.add_argument(
        "--benchmark",
        type=path_flag,
        metavar="FILE",
        help="a closed-ended benchmark (CSV or Parquet: item_id, image_id or image_path, question, "
        "options, answer, axis, task, group) each model mechanism answers by option likelihood; "
        "synthetic cohorts bring their own (benchmark.csv)",
    )
    p.add_argument(
        "--lake",
        type=path_flag,
        default=DEFAULT_LAKE,
        metavar="DIR",
        help=f"lake folder, created if missing (default {DEFAULT_LAKE})",
    )
    p.add_argument(
        "--reps",
        type=int,
        default=5000,
        metavar="N",
        help="bootstrap replicates of the estimates (default 5000, as published; with another N "
        "the published-summary check compares the point estimates only)",
    )
    p.set_defaults(func=cmd_demo)
