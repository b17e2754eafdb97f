"""Command-line entry for the raw path: `autheval synth --n N --out DIR [--seed S]`, and the
deployment simulator's `autheval synth deployment --sites N --months M --out DIR [--drift SPEC ...]`.

autheval/cli/main.py calls register(subparsers); heavy imports wait until the command runs. Progress goes
to stderr (a bar while images are written), results to stdout.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from autheval.cli.flags import SEED_MAX, add_command, add_size_flag, check_seed, path_flag
from autheval.errors import RecordError

SYNTH_SEED = 20260706  # = autheval.raw.synth.SYNTH_SEED (AuthEval's data seed), kept here for a quick CLI
DEFAULT_SIZE = (1024, 768)
# The cohort `autheval demo --source synthetic` writes. The study evaluates the test split only (about
# 15% of clusters: the gate proxy, the readout and the probe are fit on train and val, so evaluating
# every split would score them on their own training data); 4,000 images give about 2,260 clusters, 336
# of them in test, so the intervals, subgroups and fairness rows rest on enough clusters (200 images gave
# 21). Small images keep it quick: the tiny models and the pHash read 32-pixel reductions anyway.
DEMO_N, DEMO_SIZE = 4000, (128, 96)
# Image sides: at least the 32 x 32 reduction the perceptual hashes are computed on; at most 4096 (the
# ISIC 2019 images are at most 1024 on a side; a 40000 x 40000 image is 4.8 GB of pixels in memory).
SIDE_MIN, SIDE_MAX = 32, 4096
# The cohort's size and writing time, estimated as a cost per pixel plus a cost per image; the constants
# were fit once during development (one core, lesion-like JPEGs at quality 92, CSV rows included).
BYTES_PER_PIXEL, BYTES_PER_IMAGE = 0.17, 1500
SECONDS_PER_PIXEL, SECONDS_PER_IMAGE = 1.7e-7, 1e-3
# A cohort estimated above either limit is written only with --yes.
CONFIRM_BYTES, CONFIRM_SECONDS = 2 * 10**9, 30 * 60


def _size_text(n_bytes: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes:.0f} bytes"


def _time_text(seconds: float) -> str:
    for unit, scale in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= scale:
            return f"{seconds / scale:.1f} {unit}"
    return f"{seconds:.0f} s"


def cohort_estimate(n: int, size=DEFAULT_SIZE) -> tuple[float, float, str]:
    """(bytes, seconds, one line saying so) that writing `n` images of `size` takes here."""
    pixels = size[0] * size[1]
    n_bytes = n * (BYTES_PER_PIXEL * pixels + BYTES_PER_IMAGE)
    seconds = n * (SECONDS_PER_PIXEL * pixels + SECONDS_PER_IMAGE)
    return (
        n_bytes,
        seconds,
        (
            f"{n:,} images of {size[0]} x {size[1]}: about {_size_text(n_bytes)} on disk and "
            f"{_time_text(seconds)} to write here"
        ),
    )


def check_cohort_size(n: int, out: Path, size=DEFAULT_SIZE, confirm: bool | None = False) -> str:
    """Refuse (one line naming --n or --size) a cohort that cannot or should not be written: a count or
    a side out of range, more than the disk under `out` holds, or above CONFIRM_BYTES / CONFIRM_SECONDS
    unless `confirm` (synth --yes; None: the caller has no such flag, as demo). Returns the estimate."""
    if n < 1:
        raise RecordError("--n", None, f"must be a positive number of images, got {n}")
    if not all(SIDE_MIN <= side <= SIDE_MAX for side in size):
        raise RecordError(
            "--size", None, f"each side must be from {SIDE_MIN} to {SIDE_MAX} pixels, got {size[0]} {size[1]}"
        )
    n_bytes, seconds, line = cohort_estimate(n, size)
    existing = Path(out).absolute()
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if n_bytes > free:
        raise RecordError("--n", None, f"{line}, and {existing} has {_size_text(free)} free")
    if not confirm and (n_bytes > CONFIRM_BYTES or seconds > CONFIRM_SECONDS):
        limit = f"more than {_size_text(CONFIRM_BYTES)} or {_time_text(CONFIRM_SECONDS)}"
        how = (
            "write it with `autheval synth --n N --out DIR --yes` and give demo `--input DIR`"
            if confirm is None
            else "add --yes to write it"
        )
        raise RecordError("--n", None, f"{line}: {limit}; {how}")
    return line


def write_synthetic_cohort(n: int, out: Path, *, seed: int = SYNTH_SEED, size=DEFAULT_SIZE, overwrite: bool = False):
    """synth_cohort with a progress bar on stderr (shown on a terminal only) while the images are written."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from autheval.raw.synth import synth_cohort

    console = Console(stderr=True)
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task("writing images", total=n)
        try:
            return synth_cohort(
                n, out, seed=seed, size=tuple(size), overwrite=overwrite, progress=lambda: bar.advance(task)
            )
        except FileExistsError as err:
            raise RecordError("--out", None, f"{err}; add --overwrite to replace them") from err


def cmd_synth(args) -> int:
    from autheval.reporting.outputs import check_output_dir

    missing = [flag for flag, value in (("--n", args.n), ("--out", args.out)) if value is None]
    if missing:  # required for a cohort; optional only so that `synth deployment` parses
        args.synth_parser.error(f"the following arguments are required: {', '.join(missing)}")
    check_seed(args.seed)  # every flag before anything is written
    check_output_dir(args.out, "--out")
    line = check_cohort_size(args.n, args.out, tuple(args.size), confirm=args.yes)
    print(f"autheval: {line}", file=sys.stderr, flush=True)
    cohort = write_synthetic_cohort(args.n, args.out, seed=args.seed, size=args.size, overwrite=args.overwrite)
    roles = cohort.truth.column("role").to_pylist()
    print(f"wrote {len(roles)} images to {cohort.images}")
    print(f"  {roles.count('exact_duplicate')} exact duplicates, {roles.count('near_duplicate')} near duplicates")
    print(f"  {cohort.metadata}")
    print(f"  {cohort.labels}")
    print(f"  {cohort.root / 'benchmark.csv'} (a closed-ended benchmark of sampled lesions)")
    return 0


SYNTH_HELP = "write a synthetic ISIC-2019-shaped cohort (CSV files + JPEG images)"
SYNTH_DESCRIPTION = """\
Write a synthetic cohort in the exact layout of the official ISIC 2019 training files:
ISIC_2019_Training_Metadata.csv, ISIC_2019_Training_GroundTruth.csv and ISIC_2019_Training_Input/<image>.jpg,
with multi-image lesions, exact duplicates and near duplicates (synth_truth.csv says which). The same seed
gives the same bytes. Use the folder with `autheval demo --source isic2019 --input DIR`."""

DEPLOYMENT_HELP = "monthly logs of a simulated deployment (null, or with planted drift)"
DEPLOYMENT_DESCRIPTION = """\
Write one role-separated log per site and month (the AuthEval log schema plus site, model_version, timestamp
and risk_stratum; lesion clusters of several images, some seen again in a later month) from a declared
generative model: a stationary deployment, or planted changes from a given month (docs/monitoring.md, the
deployment simulator). deployment.json beside the logs holds the model and the true gap per site and month.
Drop the logs in <lake>/landing/ and run `autheval monitor run --lake DIR`. The same seed gives the same
bytes."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `synth` subcommand to the `autheval` parser."""
    p = add_command(subparsers, "synth", SYNTH_HELP, SYNTH_DESCRIPTION)
    p.add_argument("--n", type=int, help="number of images to write (required)")
    p.add_argument("--out", type=path_flag, metavar="DIR", help="output folder (created if missing; required)")
    p.add_argument(
        "--seed",
        type=int,
        default=SYNTH_SEED,
        help=f"generator seed, an integer from 0 to {SEED_MAX} (default {SYNTH_SEED})",
    )
    add_size_flag(
        p,
        DEFAULT_SIZE,
        f"image size in pixels, each side from {SIDE_MIN} to {SIDE_MAX} (default 1024 768)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace the images already in DIR")
    p.add_argument(
        "--yes",
        action="store_true",
        help=f"write a cohort estimated above {_size_text(CONFIRM_BYTES)} or {_time_text(CONFIRM_SECONDS)} "
        "(the estimate is printed on stderr before any image is written)",
    )
    p.set_defaults(func=cmd_synth, synth_parser=p)
    register_deployment(
        p.add_subparsers(
            dest="synth_kind",
            metavar="[deployment]",
            required=False,
            title="other synthetic data",
            description="`autheval synth deployment --help`: monthly logs of a "
            "simulated deployment (site, model version, time stamp)",
        )
    )


def cmd_synth_deployment(args) -> int:
    from dataclasses import replace

    from autheval.monitoring.deployment_sim import DeploymentModel, check_model, parse_drift, write_deployment
    from autheval.reporting.outputs import check_output_dir

    check_seed(args.seed)  # every flag before anything is written
    check_output_dir(args.out, "--out")
    model = DeploymentModel(
        sites=args.sites,
        months=args.months,
        clusters_per_month=args.clusters_per_month,
        model_version=args.model_version,
        start=args.start,
    )
    check_model(model)  # the size first: a drift is validated against it
    drifts = tuple(parse_drift(spec, args.sites, args.months) for spec in args.drift or ())
    model = replace(model, drifts=drifts)
    paths = write_deployment(model, args.out, seed=args.seed, fmt=args.format, overwrite=args.overwrite)
    print(f"wrote {len(paths)} monthly logs ({args.sites} sites x {args.months} months) to {args.out}")
    for drift in drifts:
        print(f"  planted: {drift.spec}")
    print(f"  {args.out / 'deployment.json'} (the declared model and the true gap per site and month)")
    return 0


def register_deployment(subparsers: argparse._SubParsersAction) -> None:
    """Add `synth deployment` (autheval.monitoring.deployment_sim)."""
    from autheval.monitoring.deployment_flags import DEPLOYMENT_SEED, DRIFT_KINDS, DRIFT_SYNTAX, START

    p = add_command(subparsers, "deployment", DEPLOYMENT_HELP, DEPLOYMENT_DESCRIPTION)
    p.add_argument("--sites", type=int, required=True, help="number of sites (site-1 ... site-N)")
    p.add_argument("--months", type=int, required=True, help="number of months (one log per site and month)")
    p.add_argument("--out", type=path_flag, required=True, metavar="DIR", help="output folder (created if missing)")
    p.add_argument(
        "--drift",
        action="append",
        metavar="SPEC",
        help=f"a planted change (repeatable): {DRIFT_SYNTAX}; kinds: {', '.join(DRIFT_KINDS)} "
        "(amount: the gap's change in simulator units = local-utility points per image; the "
        "intervention rate's change; the share of the case mix moved to the `to` stratum)",
    )
    p.add_argument(
        "--clusters-per-month",
        type=int,
        default=40,
        metavar="K",
        help="lesion clusters per site and month (default 40, about 100 images)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=DEPLOYMENT_SEED,
        help=f"generator seed, an integer from 0 to {SEED_MAX} (default {DEPLOYMENT_SEED})",
    )
    p.add_argument("--start", default=START, metavar="YYYY-MM", help=f"the first month (default {START})")
    p.add_argument(
        "--model-version",
        default="model-1",
        metavar="NAME",
        help="the model version the logs name (default model-1; a drift's version= names another)",
    )
    p.add_argument("--format", choices=("csv", "parquet"), default="csv", help="log file format (default csv)")
    p.add_argument("--overwrite", action="store_true", help="replace the logs already in DIR")
    p.set_defaults(func=cmd_synth_deployment)
