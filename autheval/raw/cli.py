"""Command-line entry for the raw path: `autheval synth --n N --out DIR [--seed S]`.

autheval/cli.py calls register(subparsers); heavy imports wait until the command runs. Progress goes
to stderr (a bar while images are written), results to stdout.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from autheval.errors import RecordError

SYNTH_SEED = 20260706  # = autheval.raw.synth.SYNTH_SEED (AuthEval's data seed), kept here for a quick CLI


def write_synthetic_cohort(n: int, out: Path, *, seed: int = SYNTH_SEED, size=(1024, 768), overwrite: bool = False):
    """synth_cohort with a progress bar on stderr (shown on a terminal only) while the images are written."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from autheval.raw.synth import synth_cohort

    console = Console(stderr=True)
    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("writing images", total=n)
        try:
            return synth_cohort(n, out, seed=seed, size=tuple(size), overwrite=overwrite,
                                progress=lambda: bar.advance(task))
        except FileExistsError as err:
            raise RecordError("--out", None, f"{err}; add --overwrite to replace them") from err


def cmd_synth(args) -> int:
    if args.n < 1:
        raise RecordError("--n", None, f"must be a positive number of images, got {args.n}")
    if args.out.exists() and not args.out.is_dir():
        raise RecordError("--out", None, f"{args.out} is a file, not a folder")
    cohort = write_synthetic_cohort(args.n, args.out, seed=args.seed, size=args.size, overwrite=args.overwrite)
    roles = cohort.truth.column("role").to_pylist()
    print(f"wrote {len(roles)} images to {cohort.images}")
    print(f"  {roles.count('exact_duplicate')} exact duplicates, {roles.count('near_duplicate')} near duplicates")
    print(f"  {cohort.metadata}")
    print(f"  {cohort.labels}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `synth` subcommand to the `autheval` parser."""
    p = subparsers.add_parser(
        "synth", help="write a synthetic ISIC-2019-shaped cohort (CSV files + JPEG images)",
        description="Write a synthetic cohort in the exact layout of the official ISIC 2019 training files: "
                    "ISIC_2019_Training_Metadata.csv, ISIC_2019_Training_GroundTruth.csv and "
                    "ISIC_2019_Training_Input/<image>.jpg, with multi-image lesions, exact duplicates and near "
                    "duplicates (synth_truth.csv says which). The same seed gives the same bytes. Use the folder "
                    "with `autheval demo --source isic2019 --input DIR`.")
    p.add_argument("--n", type=int, required=True, help="number of images to write")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="output folder (created if missing)")
    p.add_argument("--seed", type=int, default=SYNTH_SEED, help=f"generator seed (default {SYNTH_SEED})")
    p.add_argument("--size", type=int, nargs=2, default=(1024, 768), metavar=("W", "H"),
                   help="image size in pixels (default 1024 768)")
    p.add_argument("--overwrite", action="store_true", help="replace the images already in DIR")
    p.set_defaults(func=cmd_synth)
